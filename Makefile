# ZoneFleet build. `make help` lists the targets.
SHELL        := /bin/bash
GO           ?= go
BIN          := bin
PKG          := github.com/zonefleet/zonefleet
VERSION      ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
REVISION     ?= $(shell git rev-parse --short HEAD 2>/dev/null || echo unknown)
LDFLAGS      := -s -w -X $(PKG)/pkg/buildinfo.version=$(VERSION) -X $(PKG)/pkg/buildinfo.revision=$(REVISION)
CMDS         := arbiter ssdnode zctl
PROTO_DIR    := api/zonefleet/v1
PROTOS       := $(wildcard $(PROTO_DIR)/*.proto)
TOOLS        := .cache/tools
# The README's test command runs exactly this. The per-package -timeout
# guards against hangs only: it is far above any package's time on a
# saturated machine, so load alone never trips it.
TEST_FLAGS   ?= -race -count=1 -timeout 60m
# test-long: the randomized power-loss runs with -long (many seeds and crash
# points, seeds from the process id: a new sample every run), and lfs's
# concurrent stress workload without the lock-order checker. LONG_RUN and
# LONG_PKGS narrow it; CI runs a subset (see .ci/run).
LONG_PKGS    ?= ./pkg/zns ./pkg/lfs
LONG_RUN     ?= PowerLoss|TLCrash|StressConcurrentOps
LONG_FLAGS   ?= -count=1 -timeout 120m
LONG_ARGS    ?=
# bench-smoke: the wall-clock benchmark runs (FUSE mounts, gRPC timed on the
# wall clock), built with the benchsmoke tag and named TestSmoke*.
SMOKE_FLAGS  ?= -count=1 -timeout 30m

.PHONY: help build test test-short test-long test-posix bench-smoke docs-check proto proto-check lint rules dashboards run images up down test-deploy bench clean

help: ## this list
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'

build: ## static binaries into bin/
	@mkdir -p $(BIN)
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/ $(addprefix ./cmd/,$(CMDS))

test: build ## every deterministic test, race detector on (e2e tests use bin/)
	ZONEFLEET_BIN_DIR=$(CURDIR)/$(BIN) $(GO) test $(TEST_FLAGS) ./...
	# Without the race detector (ten times faster): eZNS Fig. 29 at the paper's parameters, every paper figure's second run.
	$(GO) test -count=1 -run '^(TestFig29a|TestFig29b|TestFig29c|TestDeterministic)$$' ./pkg/bench/paper/

test-long: ## randomized long runs: power-loss seeds and crash points (-long)
	$(GO) test $(LONG_FLAGS) -run '$(LONG_RUN)' $(LONG_PKGS) -args -long $(LONG_ARGS)

test-posix: build ## pjdfstest (POSIX conformance) against a `zctl local up --allow-other` mount, as root
	.ci/pjdfstest $(CURDIR)/$(BIN)/zctl

bench-smoke: ## the wall-clock benchmarks (FUSE mounts, gRPC) on small configurations
	$(GO) test -tags benchsmoke $(SMOKE_FLAGS) -run '^TestSmoke' ./pkg/bench/...

test-short: ## every test but the long scenarios, no race detector
	$(GO) test -short -count=1 ./...

docs-check: build ## links and anchors of README.md, CONTRIBUTING.md, docs/; README length; the README quickstart against bin/
	ZONEFLEET_BIN_DIR=$(CURDIR)/$(BIN) $(GO) test -count=1 ./docs/

$(TOOLS)/protoc-gen-go $(TOOLS)/protoc-gen-go-grpc: go.mod
	@mkdir -p $(TOOLS)
	$(GO) build -o $(TOOLS)/ google.golang.org/protobuf/cmd/protoc-gen-go google.golang.org/grpc/cmd/protoc-gen-go-grpc

# protoc from Debian's protobuf-compiler (3.21.12 on bookworm); plugins pinned in go.mod's tool block.
proto: $(TOOLS)/protoc-gen-go $(TOOLS)/protoc-gen-go-grpc ## regenerate api/ Go code
	protoc -I api -I /usr/include \
	  --plugin=protoc-gen-go=$(TOOLS)/protoc-gen-go --plugin=protoc-gen-go-grpc=$(TOOLS)/protoc-gen-go-grpc \
	  --go_out=api --go_opt=paths=source_relative \
	  --go-grpc_out=api --go-grpc_opt=paths=source_relative \
	  $(patsubst api/%,%,$(PROTOS))

proto-check: ## fail when the committed generated code differs from `make proto`
	@tmp=$$(mktemp -d) && cp -r api $$tmp/ && $(MAKE) -s proto >/dev/null && \
	  if ! diff -r $$tmp/api api >/dev/null; then diff -r $$tmp/api api | head -40; rm -rf api && cp -r $$tmp/api api; rm -rf $$tmp; \
	    echo "proto-check: generated code is out of date: run 'make proto' and commit"; exit 1; fi; rm -rf $$tmp; echo "proto-check: ok"

lint: ## gofmt and go vet
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) vet -tags benchsmoke ./pkg/bench/...
	$(GO) vet -tags fio ./test/fio/
	$(GO) vet -tags overload ./pkg/localcluster/
	$(GO) vet -tags deploy ./test/deploy/

# promtool comes with Debian's prometheus package (.ci/run installs it).
rules: ## check the Prometheus config and alerting rules, run their unit tests (promtool)
	promtool check config deploy/prometheus/prometheus.yml
	cd deploy/prometheus/rules && for t in *.test.yml; do promtool test rules $$t || exit 1; done

dashboards: ## regenerate deploy/grafana/dashboards/*.json from deploy/grafana (Go)
	$(GO) generate ./deploy/grafana

RUN_MOUNT    ?= .cache/local/mnt
run: build ## a whole local cluster in one process with its file system mounted at .cache/local/mnt (Ctrl-C unmounts and stops)
	@mkdir -p $(RUN_MOUNT)
	$(BIN)/zctl local up --data .cache/local --mount $(RUN_MOUNT)

# deploy/: one image FROM scratch with the static binaries and an etcd built
# from the etcd server module in go.mod; docker compose (v2 plugin or
# docker-compose 1.29) runs it. See deploy/README.md.
IMAGE        ?= zonefleet:dev
COMPOSE      ?= $(shell docker compose version >/dev/null 2>&1 && echo 'docker compose' || echo docker-compose)
COMPOSE_FILE := deploy/docker-compose.yml

images: build ## the docker image $(IMAGE) (FROM scratch: arbiter, ssdnode, zctl, etcd)
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '-s -w' -o $(BIN)/etcd go.etcd.io/etcd/server/v3
	rm -rf .cache/image && mkdir -p .cache/image/data
	cp $(addprefix $(BIN)/,$(CMDS) etcd) .cache/image/
	docker build -q -t $(IMAGE) -f deploy/Dockerfile .cache/image

up: ## start the compose cluster and wait until healthy (PROFILES=monitoring adds Prometheus and Grafana)
	$(COMPOSE) -f $(COMPOSE_FILE) $(if $(PROFILES),--profile $(PROFILES)) up -d
	deploy/wait-healthy.sh

down: ## stop the compose cluster (V=1 also deletes its volumes)
	$(COMPOSE) -f $(COMPOSE_FILE) --profile monitoring down $(if $(V),-v)

test-deploy: images ## failure drills and dashboard checks against the compose cluster (docker; prometheus for the panel test)
	ZONEFLEET_DEPLOY_TEST=1 ZONEFLEET_COMPOSE='$(COMPOSE)' $(GO) test -tags deploy -count=1 -timeout 30m -v ./test/deploy/

clean:
	rm -rf $(BIN) $(TOOLS)

# The fio engine: cgo against the installed fio's headers (Debian's source
# package of the same version; bench/fio/build-engine.sh fetches and caches
# them). Not part of `build`: it needs fio and a C compiler.
.PHONY: fio-engine test-fio
fio-engine: ## the fio external engine bin/zonefleet-fio.so (fio --thread --ioengine=external:bin/zonefleet-fio.so)
	bench/fio/build-engine.sh $(BIN)/zonefleet-fio.so

test-fio: build fio-engine ## fio job files (bench/fio/jobs) through the engine against `zctl local up`
	ZONEFLEET_BIN_DIR=$(CURDIR)/$(BIN) ZONEFLEET_FIO_ENGINE=$(CURDIR)/$(BIN)/zonefleet-fio.so \
	  $(GO) test -tags fio -count=1 -timeout 15m -v ./test/fio/
