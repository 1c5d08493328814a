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
  tune_postgres
  su postgres -c "psql -qAt -c \"select 1 from pg_roles where rolname='mneme'\"" | grep -q 1 ||
    su postgres -c "psql -q -c \"create role mneme login superuser password 'mneme'\""
  su postgres -c "psql -q -c 'drop database if exists $db'" >/dev/null
  su postgres -c "psql -q -c 'create database $db owner mneme'"
  export MNEME_TEST_POSTGRES="postgres://mneme:mneme@127.0.0.1:5432/$db?sslmode=disable"
  echo "== PostgreSQL ready: $MNEME_TEST_POSTGRES"
}

# tune_postgres sets what an operator sets on a server taking a steady
# stream of durable writes (README, Speed), by ALTER SYSTEM and a reload,
# no restart: checkpoints every 15 minutes or 4 GB of WAL rather than 5
# minutes or 1 GB (each checkpoint writes the dirty pages, and the first
# change of each page after it logs the whole page; issue 19's append
# bench writes ~4 KB of WAL a message), 1 GB of WAL files kept for reuse
# rather than 80 MB (a commit that finds none to reuse creates and
# zero-fills a 16 MB file: 2% of the server's CPU in that bench with the
# defaults, a third while none was left), and full-page images compressed
# (lz4 where the server has it). Durability is untouched: fsync,
# synchronous_commit and full_page_writes keep their defaults (on).
# Measured on a shared 2-core machine: 16 rounds of that bench with these
# settings were no faster than 16 without, beyond the load's noise, and
# overlapped 1 checkpoint against 3. (start_postgres's DROP DATABASE makes
# PostgreSQL checkpoint at once: one checkpoint per test run of anyone
# sharing the server.) MNEME_PG_TUNE=0 resets these settings to the
# server's defaults, for a comparison.
tune_postgres() {
  local q="su postgres -c"
  local settings
  if [ "${MNEME_PG_TUNE:-1}" = 0 ]; then
    settings="max_wal_size min_wal_size checkpoint_timeout checkpoint_completion_target wal_compression"
    for s in $settings; do $q "psql -qAt -c 'alter system reset $s'" >/dev/null; done
  else
    local comp=on
    if $q "psql -qAt -c \"select enumvals::text from pg_settings where name = 'wal_compression'\"" | grep -q lz4; then
      comp=lz4
    fi
    $q "psql -qAt -c \"alter system set max_wal_size = '4GB'\"" >/dev/null
    $q "psql -qAt -c \"alter system set min_wal_size = '1GB'\"" >/dev/null
    $q "psql -qAt -c \"alter system set checkpoint_timeout = '15min'\"" >/dev/null
    $q "psql -qAt -c \"alter system set checkpoint_completion_target = 0.9\"" >/dev/null
    $q "psql -qAt -c \"alter system set wal_compression = '$comp'\"" >/dev/null
  fi
  $q "psql -qAt -c 'select pg_reload_conf()'" >/dev/null
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
