#!/usr/bin/env bash
# Makes sure what the test suite needs is present, so `make test` works on a
# fresh machine with nothing done by hand:
#   - Go modules (from the module proxy);
#   - if npm is installed, the official Standard Webhooks library for
#     JavaScript, which cmd/aquiferd's interop test verifies deliveries with
#     (installed once into the user cache directory; a failure here is only a
#     warning: the test installs it itself, and fails if it cannot);
#   - a PostgreSQL server on 127.0.0.1:5432 accepting user postgres without a
#     password from loopback, with a database named "test" (the Postgres
#     store's tests give each test its own schema in it).
# Postgres is started if it is installed but stopped, and installed with apt
# if it is missing (CI runs as root). Set TEST_DATABASE_URL to use another
# server; then this script leaves Postgres alone.
set -euo pipefail
cd "$(dirname "$0")/.."

go mod download

# The same directory as standardWebhooksDir() in
# cmd/aquiferd/standardwebhooks_e2e_test.go (Go's os.UserCacheDir on Linux).
warm_standardwebhooks() {
	local dir="${XDG_CACHE_HOME:-$HOME/.cache}/aquifer-test/standardwebhooks-1.1.1"
	[ -f "$dir/installed" ] && return 0
	mkdir -p "$(dirname "$dir")"
	local tmp
	tmp=$(mktemp -d "$(dirname "$dir")/.install-XXXXXX")
	echo '{"private": true}' >"$tmp/package.json"
	if (cd "$tmp" && npm_config_update_notifier=false npm install --no-audit --no-fund standardwebhooks@1.1.1 >/dev/null 2>&1) &&
		echo 1.1.1 >"$tmp/installed" && mv -T "$tmp" "$dir" 2>/dev/null; then
		return 0
	fi
	rm -rf "$tmp"
	[ -f "$dir/installed" ]
}
if command -v npm >/dev/null 2>&1; then
	warm_standardwebhooks || echo "test-deps: could not install standardwebhooks with npm; the interop test will try again" >&2
fi

if [ -n "${TEST_DATABASE_URL:-}" ] || [ "${AQUIFER_TEST_POSTGRES:-}" = skip ]; then
	exit 0
fi

as_postgres() {
	if [ "$(id -u)" = 0 ]; then
		su postgres -s /bin/sh -c "$*"
	else
		sh -c "$*"
	fi
}

ready() { pg_isready -q -h 127.0.0.1 -p 5432 2>/dev/null; }

if ! command -v pg_ctlcluster >/dev/null 2>&1 && ! ready; then
	echo "test-deps: PostgreSQL is not installed; installing it with apt" >&2
	if [ "$(id -u)" != 0 ]; then
		echo "test-deps: need root to install PostgreSQL (or set TEST_DATABASE_URL)" >&2
		exit 1
	fi
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq postgresql >/dev/null
fi

if ! ready; then
	version=$(ls /etc/postgresql | sort -V | tail -n 1)
	echo "test-deps: starting PostgreSQL $version" >&2
	pg_ctlcluster --skip-systemctl-redirect "$version" main start || true
	for _ in $(seq 1 50); do ready && break; sleep 0.2; done
fi
if ! ready; then
	echo "test-deps: PostgreSQL does not accept connections on 127.0.0.1:5432" >&2
	exit 1
fi

# Loopback connections as postgres without a password: the tests' DSN.
if ! psql -h 127.0.0.1 -U postgres -d postgres -Atc 'select 1' >/dev/null 2>&1; then
	version=$(ls /etc/postgresql | sort -V | tail -n 1)
	hba=/etc/postgresql/$version/main/pg_hba.conf
	echo "test-deps: allowing trust auth for postgres from 127.0.0.1 in $hba" >&2
	sed -i '1i host all postgres 127.0.0.1/32 trust' "$hba"
	as_postgres "psql -Atc 'select pg_reload_conf()'" >/dev/null
	sleep 0.5
fi
if ! psql -h 127.0.0.1 -U postgres -d postgres -Atc "select 1 from pg_database where datname = 'test'" | grep -q 1; then
	psql -h 127.0.0.1 -U postgres -d postgres -qc 'create database test'
fi
