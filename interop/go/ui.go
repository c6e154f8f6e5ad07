package main

import (
	"context"
	"database/sql"
	"flag"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"riverqueue.com/riverui"
)

// uiCommand serves River UI (riverqueue.com/riverui) at /, its API under /api, until
// SIGTERM or SIGINT. The first stdout line is {"event":"listening","url":...}.
func uiCommand(fs *flag.FlagSet) func(context.Context, *database) error {
	listen := fs.String("listen", "127.0.0.1:0", "address to listen on")
	return func(ctx context.Context, db *database) error {
		return withDriver(db,
			func(e env[pgx.Tx]) error { return serveUI(ctx, e, *listen) },
			func(e env[*sql.Tx]) error { return serveUI(ctx, e, *listen) })
	}
}

func serveUI[TTx any](ctx context.Context, e env[TTx], listen string) error {
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	// An insert-only client, as River UI's own command makes: the UI reads and acts
	// through it and never works jobs.
	client, err := river.NewClient(e.driver, &river.Config{Schema: e.db.schema, Logger: logger})
	if err != nil {
		return err
	}
	handler, err := riverui.NewHandler(&riverui.HandlerOpts{
		Endpoints: riverui.NewEndpoints(client, nil),
		Logger:    logger,
	})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if err := handler.Start(ctx); err != nil {
		return err
	}
	listener, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	server := &http.Server{Handler: handler}
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-signals
		_ = server.Shutdown(context.Background())
	}()
	emit(map[string]any{"event": "listening", "url": "http://" + listener.Addr().String()})
	if err := server.Serve(listener); err != nil && err != http.ErrServerClosed {
		return err
	}
	return nil
}
