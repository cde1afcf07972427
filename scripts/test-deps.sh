#!/usr/bin/env bash
# Makes sure what the test suite needs is present, so `make test` works on a
# fresh machine with nothing done by hand:
#   - Go modules (from the module proxy);
#   - if npm is installed, the official Standard Webhooks library for
#     JavaScript, which cmd/aquiferd's interop test verifies deliveries with
#     (installed once into the user cache directory; a failure here is only a
#     warning: the test installs it itself, and fails if it cannot);
#   - Chromium, for the dashboard's browser tests
#     (cmd/aquiferd/dashboard_e2e_test.go drive it headless with chromedp),
#     with chromium-driver beside it where Debian has that package;
#   - a PostgreSQL server on 127.0.0.1:5432 accepting user postgres without a
#     password from loopback, with a database named "test" (the Postgres
#     store's tests give each test its own schema in it).
# Chromium and Postgres are installed with apt when missing (CI runs as root;
# anyone else is told the command to run), and Postgres is started if it is
# installed but stopped. Set TEST_DATABASE_URL to use another server; then
# this script leaves Postgres alone. Set AQUIFER_CHROMIUM to a Chrome or
# Chromium binary to use that one instead of Debian's.
set -euo pipefail
cd "$(dirname "$0")/.."

# apt_install installs Debian packages, refreshing the package lists once
# per run. Only root may: others get the command to run themselves.
apt_updated=
apt_install() {
	if [ "$(id -u)" != 0 ]; then
		echo "test-deps: need root to install $*: run  sudo apt-get install $*  (or run this script as root)" >&2
		return 1
	fi
	export DEBIAN_FRONTEND=noninteractive
	if [ -z "$apt_updated" ]; then
		apt-get update -qq
		apt_updated=1
	fi
	apt-get install -y -qq "$@" >/dev/null
}

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

# The browser tests look for the same names (chromiumPath in
# cmd/aquiferd/dashboard_e2e_test.go) and fail, naming this script, when none
# is found.
have_chromium() {
	if [ -n "${AQUIFER_CHROMIUM:-}" ]; then
		command -v "$AQUIFER_CHROMIUM" >/dev/null 2>&1
		return
	fi
	command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1
}
if ! have_chromium; then
	if [ -n "${AQUIFER_CHROMIUM:-}" ]; then
		echo "test-deps: AQUIFER_CHROMIUM=$AQUIFER_CHROMIUM is not an executable" >&2
		exit 1
	fi
	echo "test-deps: Chromium is not installed; installing it with apt" >&2
	apt_install chromium || {
		echo "test-deps: or set AQUIFER_CHROMIUM to a Chrome or Chromium binary" >&2
		exit 1
	}
fi
# chromedp speaks to the browser directly; chromium-driver (WebDriver) is
# installed beside it for tools that want one, where the package exists.
if [ -z "${AQUIFER_CHROMIUM:-}" ] && [ "$(id -u)" = 0 ] && command -v apt-cache >/dev/null 2>&1 &&
	! command -v chromedriver >/dev/null 2>&1; then
	if [ -z "$apt_updated" ]; then
		apt-get update -qq
		apt_updated=1
	fi
	if apt-cache show chromium-driver >/dev/null 2>&1; then
		apt_install chromium-driver
	fi
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
	apt_install postgresql || {
		echo "test-deps: or set TEST_DATABASE_URL to a server of your own" >&2
		exit 1
	}
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
