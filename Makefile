# goroce: `make test` is the README's test command; `.ci/run` calls it, then `make interop`.
GO      ?= go
PKGS    := $(shell $(GO) list ./... | grep -v /interop)
RACE    := $(PKGS)

.PHONY: all build test vet fmt-check unit race bench cross interop ci demo

all: build

build:
	$(GO) build ./...

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet ./...

# Unit tests of everything but the VM interop suite. Tests that need root
# (network namespaces, AF_XDP, AF_PACKET) skip with a reason when not root
# and fail when skipped under CI=true.
unit:
	$(GO) test -count=1 -timeout 15m $(PKGS)

race:
	$(GO) test -race -count=1 -timeout 20m $(RACE)

# Every benchmark once, so they keep compiling and running.
bench:
	$(GO) test -run '^$$' -bench . -benchtime 1x -timeout 10m $(PKGS)

# The systems and architectures besides linux/amd64 that goroce builds for.
CROSS   := darwin/amd64 darwin/arm64 windows/amd64 freebsd/amd64 linux/arm64

# Every package, with its tests (go vet type-checks the test files), and the
# goroce binary build on each of them. The first run compiles the standard
# library and the dependencies for each target (minutes); after that the
# build cache makes it a few seconds per target.
cross:
	@set -e; for t in $(CROSS); do \
		echo "cross: GOOS=$${t%/*} GOARCH=$${t#*/}"; \
		GOOS=$${t%/*} GOARCH=$${t#*/} $(GO) vet ./...; \
		GOOS=$${t%/*} GOARCH=$${t#*/} $(GO) build -o /dev/null ./cmd/goroce; \
	done

test: fmt-check vet cross race bench

demo:
	$(GO) run ./cmd/goroce demo

# The rxe-in-qemu interoperability matrix (root, qemu).
interop:
	bash interop/run.sh

ci: test interop
