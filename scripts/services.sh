# Sourced by scripts/test: starts the services the tests need.

# start_postgres makes sure a PostgreSQL server runs on this machine and
# exports MNEME_TEST_POSTGRES, the DSN of a fresh test database
# (MNEME_TEST_DB names it, mneme_test by default: a second run on one
# machine, beside developers' tests, takes its own database instead of
# dropping theirs).
start_postgres() {
  local db="${MNEME_TEST_DB:-mneme_test}"
  if ! command -v pg_ctlcluster >/dev/null 2>&1; then
    echo "== installing PostgreSQL from Debian's packages"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null
    apt-get install -y -qq postgresql >/dev/null
  fi
  local ver
  ver=$(ls /etc/postgresql 2>/dev/null | sort -n | tail -1)
  if [ -z "$ver" ]; then
    ver=$(ls /usr/lib/postgresql | sort -n | tail -1)
    pg_createcluster "$ver" main >/dev/null
  fi
  if ! pg_lsclusters -h | awk -v v="$ver" '$1==v && $2=="main" && $4=="online"' | grep -q .; then
    echo "== starting PostgreSQL $ver"
    pg_ctlcluster "$ver" main start
  fi
  for _ in $(seq 1 30); do
    if su postgres -c "psql -qAt -c 'select 1'" >/dev/null 2>&1; then break; fi
    sleep 1
  done
  su postgres -c "psql -qAt -c \"select 1 from pg_roles where rolname='mneme'\"" | grep -q 1 ||
    su postgres -c "psql -q -c \"create role mneme login superuser password 'mneme'\""
  su postgres -c "psql -q -c 'drop database if exists $db'" >/dev/null
  su postgres -c "psql -q -c 'create database $db owner mneme'"
  export MNEME_TEST_POSTGRES="postgres://mneme:mneme@127.0.0.1:5432/$db?sslmode=disable"
  echo "== PostgreSQL ready: $MNEME_TEST_POSTGRES"
}

# ---- issue 9: the inspector's browser test (server/inspector_browser_test.go)
# ensure_chromium installs Debian's chromium when it is missing: the browser
# test skips without it outside CI and fails without it in CI.
ensure_chromium() {
  if [ -x /usr/bin/chromium ]; then return; fi
  echo "== installing chromium from Debian's packages"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  apt-get install -y -qq chromium >/dev/null
}
# ---- end issue 9
