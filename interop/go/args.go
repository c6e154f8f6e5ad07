package main

import (
	"encoding/json"
	"fmt"

	"github.com/riverqueue/river"
)

// RawArgs are args whose JSON is kept byte for byte as given (River's json.RawMessage
// case) and whose kind is chosen at run time, so one Go type covers every kind the
// tests insert and work.
type RawArgs struct {
	kind string
	raw  json.RawMessage
}

func (a RawArgs) Kind() string { return a.kind }

func (a RawArgs) MarshalJSON() ([]byte, error) {
	if len(a.raw) == 0 {
		return []byte("{}"), nil
	}
	return a.raw, nil
}

func (a *RawArgs) UnmarshalJSON(data []byte) error {
	a.raw = append(json.RawMessage(nil), data...)
	return nil
}

// mapKind is the kind of args given as JSON and re-encoded the way a Go program holding
// them in maps and float64s stores them: encoding/json sorts map keys at every depth,
// escapes <, > and &, and writes numbers as float64. (River's unique-by-args needs a
// struct type, so they travel as RawArgs.)
const mapKind = "interop_map"

// UniqueFieldsArgs marks two of its fields `river:"unique"`: with ByArgs, only they
// make the unique key.
type UniqueFieldsArgs struct {
	CustomerID int    `json:"customer_id" river:"unique"`
	Region     string `json:"region" river:"unique"`
	Note       string `json:"note"`
}

func (UniqueFieldsArgs) Kind() string { return "interop_unique_fields" }

// NestedUniqueArgs tags a field of a nested struct: River's key holds it under the
// dotted path customer.id.
type NestedUniqueArgs struct {
	Customer struct {
		ID   int    `json:"id" river:"unique"`
		Name string `json:"name"`
	} `json:"customer"`
	Note string `json:"note"`
}

func (NestedUniqueArgs) Kind() string { return "interop_nested_unique" }

// PathyFieldsArgs has unique fields whose JSON names hold the characters a JSON path
// language treats specially.
type PathyFieldsArgs struct {
	Dotted string `json:"a.b" river:"unique"`
	Star   string `json:"x*y" river:"unique"`
	Note   string `json:"note"`
}

func (PathyFieldsArgs) Kind() string { return "interop_pathy_fields" }

// argsFor builds the Go value of one of the types above from a request's type name,
// kind and JSON args.
func argsFor(typeName, kind string, raw json.RawMessage) (river.JobArgs, error) {
	switch typeName {
	case "", "raw":
		if kind == "" {
			return nil, fmt.Errorf("raw args need a kind")
		}
		return RawArgs{kind: kind, raw: raw}, nil
	case "map":
		var decoded map[string]any
		if err := json.Unmarshal(raw, &decoded); err != nil {
			return nil, err
		}
		encoded, err := json.Marshal(decoded)
		return RawArgs{kind: mapKind, raw: encoded}, err
	case "unique_fields":
		var args UniqueFieldsArgs
		err := json.Unmarshal(raw, &args)
		return args, err
	case "nested_unique":
		var args NestedUniqueArgs
		err := json.Unmarshal(raw, &args)
		return args, err
	case "pathy_fields":
		var args PathyFieldsArgs
		err := json.Unmarshal(raw, &args)
		return args, err
	default:
		return nil, fmt.Errorf("unknown args type %q", typeName)
	}
}
