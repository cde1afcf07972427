#!/usr/bin/env bash
# Makes sure what the test suite needs is present: Go modules (from the module
# proxy). Later backends add their services here.
set -euo pipefail
cd "$(dirname "$0")/.."
go mod download
