# Shared set-up for scripts/*: a virtualenv with riverboat[dev], and Postgres binaries.
# shellcheck shell=bash

pick_python() {
  for candidate in "${PYTHON:-}" python3 python3.13 python3.12 python3.11; do
    [ -n "$candidate" ] || continue
    if command -v "$candidate" >/dev/null 2>&1 &&
       "$candidate" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)'; then
      echo "$candidate"; return 0
    fi
  done
  echo "riverboat needs Python 3.11 or newer" >&2; return 1
}

ensure_venv() {
  local extra="${1:-dev}"
  if [ ! -x .venv/bin/python ]; then
    "$(pick_python)" -m venv .venv
  fi
  local stamp=".venv/.riverboat-$extra-$(cat pyproject.toml | cksum | cut -d' ' -f1)"
  if [ ! -f "$stamp" ]; then
    .venv/bin/python -m pip install -q --upgrade pip
    .venv/bin/python -m pip install -q -e ".[$extra]"
    touch "$stamp"
  fi
}

have_postgres() {
  [ -n "${RIVERBOAT_TEST_DATABASE_URL:-}" ] && return 0
  [ -n "${RIVERBOAT_PG_BIN:-}" ] && [ -x "$RIVERBOAT_PG_BIN/initdb" ] && return 0
  ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1
}

ensure_postgres() {
  have_postgres && return 0
  if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
    echo "installing Debian's postgresql server package..." >&2
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql postgresql-contrib >/dev/null
  else
    echo "no Postgres server found: install postgresql or set RIVERBOAT_PG_BIN" >&2
    return 1
  fi
}

# A Python 3.12+ interpreter if the machine has one (pyenv's or on PATH), else nothing:
# the runtime starts job tasks eagerly there, a code path 3.11 never takes.
find_python_312_plus() {
  local candidate
  for candidate in python3.13 python3.12 \
      "$(pyenv root 2>/dev/null)"/versions/3.13*/bin/python \
      "$(pyenv root 2>/dev/null)"/versions/3.12*/bin/python; do
    if [ -x "$(command -v "$candidate" 2>/dev/null)" ] &&
       "$candidate" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 12) else 1)' 2>/dev/null; then
      echo "$candidate"; return 0
    fi
  done
  return 1
}

# Debian's chromium for the dashboard's browser tests (tests/ui): playwright drives this
# system binary, since its own browser download is unavailable here. Installed when
# missing and we are root with apt-get; otherwise those tests say why they skip.
have_chromium() {
  command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 ||
    { [ -n "${RIVERBOAT_CHROMIUM:-}" ] && [ -x "$RIVERBOAT_CHROMIUM" ]; }
}

ensure_chromium() {
  have_chromium && return 0
  if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
    echo "installing Debian's chromium package (browser tests of riverboat ui)..." >&2
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
  else
    echo "no chromium found: the browser tests of riverboat ui will skip (apt-get install chromium)" >&2
    return 0
  fi
}
