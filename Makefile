# Aquifer developer loop. `make help` lists the targets.
SHELL := /bin/bash
GO    ?= go
BIN   := bin
export GOFLAGS := -buildvcs=false
export GORACE  := atexit_sleep_ms=0

.PHONY: help run build test test/short bench lint vet fmt clean screenshots

help: ## list targets
	@grep -E '^[a-zA-Z/_-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'

build: ## build aquiferd and the tools into ./bin
	$(GO) build -o $(BIN)/aquiferd ./cmd/aquiferd
	$(GO) build -o $(BIN)/aquifer-bench ./cmd/aquifer-bench

run: ## build and start aquiferd on 127.0.0.1:8080 (AQUIFER_HOST=0.0.0.0: all interfaces) with data in ./data
	$(GO) build -o $(BIN)/aquiferd ./cmd/aquiferd
	PORT=$${PORT:-8080} AQUIFER_LOG_FORMAT=$${AQUIFER_LOG_FORMAT:-console} ./$(BIN)/aquiferd

test: ## go vet + the whole suite with the race detector
	@scripts/test-deps.sh
	$(GO) vet ./...
	$(GO) test -race -count=1 -timeout 15m ./...

test/short: ## quick run without the race detector or the slow end-to-end tests
	$(GO) test -short -count=1 ./...

screenshots: ## write docs/img/dashboard-*.png: each dashboard page in headless Chromium, from a seeded aquiferd on Postgres
	@scripts/test-deps.sh
	AQUIFER_SCREENSHOTS=$(CURDIR)/docs/img $(GO) test -count=1 -run '^TestDashboardScreenshots$$' -v ./cmd/aquiferd/

STORE ?= sqlite

bench: build ## run cmd/aquifer-bench against a freshly started aquiferd; STORE=sqlite|pebble|postgres (or a list), BENCH_ARGS=…
	./$(BIN)/aquifer-bench -aquiferd ./$(BIN)/aquiferd -store $(STORE) $(BENCH_ARGS)

.PHONY: interop
interop: ## drive aquiferd with the official TypeScript MCP and A2A clients from npm (needs node, npm)
	scripts/interop.sh

lint: ## gofmt, go vet and the architecture rules
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) test -count=1 ./internal/archtest/

fmt: ## gofmt the tree
	gofmt -w $$(git ls-files '*.go')

clean: ## remove build output
	rm -rf $(BIN)
