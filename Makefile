# vpcgw: the two commands a new machine needs are `make lab` and `make test` (both as root).

SHELL := /usr/bin/env bash
GO ?= go
ASSETS ?= $(or $(VPCGW_ASSETS),$(HOME)/.cache/vpcgw/envtest-v1.37.2)
export KUBEBUILDER_ASSETS := $(ASSETS)
# The install-script tests run this kubectl (built with the envtest binaries, same version).
export VPCGW_KUBECTL := $(ASSETS)/kubectl
# helm, built from its Go module (hack/tools/helm); the deploy tests read VPCGW_HELM.
HELM_DIR ?= $(HOME)/.cache/vpcgw/helm-v3.22.0
export VPCGW_HELM := $(HELM_DIR)/helm
# kube-ovn-controller v1.16.2 and what runs it (its CRDs, OVN schemas, gateway script), built from
# its Go module (hack/tools/kubeovn); the lab and the K tests read VPCGW_KUBEOVN.
KUBEOVN_DIR ?= $(HOME)/.cache/vpcgw/kube-ovn-v1.16.2
export VPCGW_KUBEOVN := $(KUBEOVN_DIR)
# Open vSwitch and OVN as kube-ovn v1.16.2 ships them (OVS branch-3.5, OVN branch-25.03, kube-ovn's
# patches), built from ../shared/third_party/ovn or their public repositories (hack/tools/ovn):
# the lab and the tests run ovsdb-server, ovs-vswitchd, ovn-northd, ovn-controller and the ctl
# tools from here, first on PATH.
OVN_DIR ?= $(HOME)/.cache/vpcgw/ovn-25.03-4eddbd952d0c-ovs-3.5-cb3bb5a5c15e
export VPCGW_OVN := $(OVN_DIR)
export PATH := $(OVN_DIR)/bin:$(OVN_DIR)/sbin:$(PATH)

# golangci-lint, built from its Go module (hack/tools/golangci-lint); `make lint` runs it.
GOLANGCI_LINT_DIR ?= $(HOME)/.cache/vpcgw/golangci-lint-v2.15.0
GOLANGCI_LINT := $(GOLANGCI_LINT_DIR)/golangci-lint

.PHONY: plugin bench figures fuzz all build deps assets helm kubeovn ovn ovn-rebuild golangci-lint images release release-tag generate lab lab-stay soak test unit fmt-check vet lint

all: build

# The version the binaries print (vpcgw version, vpcgw-agent --version) and the agent reports to
# the controller. `make release TAG=v0.3.0` cuts that release tag first, and it is the VERSION.
ifneq ($(TAG),)
VERSION := $(TAG)
endif
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -s -w -X github.com/vpcgw/vpcgw/internal/version.Version=$(VERSION)

# bin/vpcgw: controller and webhook (the product); bin/vpcgw-agent: the gateway agent, static;
# bin/vpcgw-lab: the lab, the bench and their helpers (dev only, never shipped).
build:
	$(GO) build -trimpath -ldflags='$(LDFLAGS)' -o bin/vpcgw ./cmd/vpcgw
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags='$(LDFLAGS)' -o bin/vpcgw-agent ./cmd/vpcgw-agent
	$(GO) build -trimpath -ldflags='$(LDFLAGS)' -o bin/vpcgw-lab ./cmd/vpcgw-lab

# The kubectl plugin for this machine (bin/kubectl-vpcgw), built as the release builds it:
# static, stripped, with the version it reports (`kubectl vpcgw version --client`).
plugin:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags='$(LDFLAGS) -buildid=' -o bin/kubectl-vpcgw ./cmd/kubectl-vpcgw

# The container images, without a container engine (hack/tools/images, go-containerregistry from
# the Go module proxy): OCI image layouts bin/images/vpcgw (controller and webhook, with the agent
# builds the controller copies into kube-ovn's gateway containers) and bin/images/vpcgw-agent (the
# agent alone), each an index for linux/amd64 and linux/arm64, plus bin/images/images.json (tag and
# digests), and each image's SBOM (<image>.spdx.json, also inside the image), with full
# org.opencontainers.image.* labels (revision: REVISION, the commit). Reproducible: the same
# commit, VERSION and SOURCE_DATE_EPOCH give the same digests.
# The tag is VERSION with what a tag cannot hold ('+', '/') replaced by '-'; on a release commit
# (tag v<appVersion> of deploy/helm/vpcgw/Chart.yaml) it is the chart's default image tag.
# test/images reads them back (make test builds them first).
IMAGES_DIR ?= bin/images
IMAGE_TAG := $(subst /,-,$(subst +,-,$(VERSION)))
SOURCE_DATE_EPOCH ?= $(shell git log -1 --format=%ct 2>/dev/null || echo 0)
REVISION ?= $(shell git rev-parse HEAD)
export VPCGW_IMAGES := $(abspath $(IMAGES_DIR))
images:
	$(GO) -C hack/tools/images run . --repo "$(CURDIR)" --out "$(VPCGW_IMAGES)" --version "$(IMAGE_TAG)" --revision "$(REVISION)" --source-date-epoch "$(or $(SOURCE_DATE_EPOCH),0)"

# A release (hack/tools/release), everything an operator installs, in bin/release: the chart
# packaged (version and appVersion from VERSION, the image's digest pinned), both images as OCI
# archives with their SBOMs, the plugin's krew archives and manifest, the plain manifests,
# install.sh, LICENSE, release notes and SHA256SUMS. VERSION becomes a semantic version: v0.3.0
# on the tag v0.3.0, v0.3.1-dev.4.gabcdef0 four commits after it, v0.0.0-<hash> without a tag.
# Reproducible as the images are. test/release reads it back (make test builds it first: about a
# minute with a warm Go build cache, a quarter of an hour the first time on two cores, when the
# plugin's dependencies are compiled for darwin and arm64).
# TAG=v0.3.0 cuts the release tag at HEAD first (hack/tools/release/tag.go: a clean tree, the
# source chart's version 0.3.0 and appVersion v0.3.0, the tag not on another commit), then builds
# the images and the release of that version.
RELEASE_DIR ?= bin/release
export VPCGW_RELEASE := $(abspath $(RELEASE_DIR))
# SIGNING_KEY, an ECDSA P-256 private key (PEM: openssl genpkey -algorithm EC -pkeyopt
# ec_paramgen_curve:P-256), signs SHA256SUMS as cosign sign-blob does (SHA256SUMS.sig, and the
# public key vpcgw-release.pub; hack/tools/release/sign.go). Unset: unsigned. `make test` signs its
# release with a throwaway key (bin/test-signing.key), which test/release verifies.
SIGNING_KEY ?=
release: helm $(if $(TAG),release-tag images)
	$(GO) -C hack/tools/release run . --repo "$(CURDIR)" --out "$(VPCGW_RELEASE)" --version "$(VERSION)" --source-date-epoch "$(or $(SOURCE_DATE_EPOCH),0)" --helm "$(VPCGW_HELM)" --go "$(GO)" $(if $(SIGNING_KEY),--signing-key "$(abspath $(SIGNING_KEY))")

bin/test-signing.key:
	mkdir -p bin
	openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out $@

release-tag:
	$(GO) -C hack/tools/release run . tag --repo "$(CURDIR)" "$(TAG)"

# Debian packages (nftables, iproute2, conntrack, ...: hack/install-deps.sh).
deps:
	hack/install-deps.sh

# kube-apiserver and etcd for envtest, kube-controller-manager, kubectl and kube-proxy (the bench's
# comparison), built from the Go module proxy (~10 min the first time; kube-proxy alone, over
# that build cache, well under a minute of CPU).
assets:
	hack/tools/build-assets.sh "$(ASSETS)"

# helm for the chart tests (deploy/), built from the Go module proxy (a few minutes the first time).
helm:
	hack/tools/helm/build.sh "$(HELM_DIR)"

# golangci-lint for `make lint`, built from the Go module proxy (several minutes the first time).
golangci-lint:
	hack/tools/golangci-lint/build.sh "$(GOLANGCI_LINT_DIR)"

# kube-ovn-controller v1.16.2 and its CRDs, schemas and gateway script (~5 min the first time).
kubeovn:
	hack/tools/kubeovn/build.sh "$(KUBEOVN_DIR)"

# kube-ovn's OVS and OVN (~12 min the first time on two cores; nothing when built).
ovn:
	hack/tools/ovn/build.sh "$(OVN_DIR)"

# OVN alone again over the kept OVS build (after a change to its patches or pins, ~3 min).
ovn-rebuild:
	hack/tools/ovn/build.sh --rebuild-ovn "$(OVN_DIR)"

# Deepcopy code and CRD YAML from api/kubeovn/v1 (controller-gen, hack/tools/controllergen).
generate:
	hack/generate.sh

# The local lab: API server, gateway, backends, an external client, traffic through the EIP.
lab: deps assets kubeovn ovn build
	./bin/vpcgw-lab lab $(LAB_ARGS)

# The same lab, left running for your own Services (prints a KUBECONFIG; Ctrl-C ends it).
# NO_VPCGW=1 leaves vpcgw out, to install it from the release as the user guide says (the release
# is built first; the lab node runs its images from bin/release, no registry needed).
lab-stay: deps assets kubeovn ovn build $(if $(NO_VPCGW),images release)
	./bin/vpcgw-lab lab --stay $(if $(NO_VPCGW),--no-vpcgw --release "$(VPCGW_RELEASE)") $(LAB_ARGS)

# The soak with faults beside kube-ovn-controller: steady traffic, churn and faults for SOAK_ARGS
# --duration (default 30m), then the leak check (docs/reliability.md). CI runs one round of it
# (test/kubeovn TestSoakWithFaultsShort).
soak: deps assets kubeovn ovn build
	./bin/vpcgw-lab soak $(SOAK_ARGS)

# The end-to-end bench in the lab, beside kube-ovn-controller and kube-proxy (nftables mode) and
# the `nft -f` baseline (docs/benchmarks.md). BENCH_ARGS replaces the defaults: 100, 1,000 and
# 10,000 Services × 10 endpoints, kube-proxy with its default minimum sync period and with 0.
# At 10,000 the run takes 20-30 minutes on two cores, most of it writing the Services.
BENCH_ARGS ?= -n 100,1000,10000 -m 10 -rate 20 -duration 30s -kube-proxy default,0 -json bin/bench.json
bench: deps assets kubeovn ovn build
	./bin/vpcgw-lab bench $(BENCH_ARGS)

# Every test: unit tests (race detector), integration tests against the real API server, real
# nftables in network namespaces, and the end-to-end lab tests. VPCGW_REQUIRE_ALL=1 turns every
# "this machine lacks X" skip into a failure, so nothing is silently skipped here.
test: SIGNING_KEY = $(CURDIR)/bin/test-signing.key
test: deps assets helm kubeovn ovn images bin/test-signing.key release fmt-check vet lint
	VPCGW_REQUIRE_ALL=1 $(GO) test -race -count=1 -timeout 30m ./...
	$(MAKE) fuzz

# A short fuzzing run of everything that parses input from outside (the corpora in each
# package's testdata/fuzz run with every go test): the agent's stream lines and its line reader,
# records read back from the API, the status ConfigMap, admission requests, annotations.
# A count, not a duration: Go 1.26's fuzz coordinator can fail a target with a bare "context
# deadline exceeded" when a duration -fuzztime ends while a worker is busy (golang/go#75804,
# fixed in Go 1.27); CI's stop 29 failed so, on a loaded machine, with no failing input.
FUZZTIME ?= 10000x
FUZZ_TARGETS = ./internal/dataplane:FuzzStateLine ./internal/transport/lineio:FuzzReadLine \
	./internal/model:FuzzRecords ./internal/model:FuzzAnnotations ./internal/status:FuzzDecode \
	./internal/webhook:FuzzAdmissionRequests ./internal/webhook:FuzzServiceAnnotations
fuzz:
	@set -e; for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; name=$${t##*:}; \
		echo "fuzz $$pkg $$name ($(FUZZTIME))"; \
		$(GO) test -run '^$$' -fuzz "^$$name\$$" -fuzztime $(FUZZTIME) -timeout 10m $$pkg; \
	done

# Fast tests only (no root, no API server needed; the others skip with a reason).
unit:
	$(GO) test -race -count=1 ./...

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' | grep -v '^hack/tools/')); \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet ./...

# The controller's shape figures read from the source (hack/tools/figures): its product lines,
# the per-gateway sync's length and complexity, functions of 80 lines or more, the reconciler's
# size. FIGURES_REPO measures another checkout (an older commit's worktree, say).
FIGURES_REPO ?= $(CURDIR)
figures:
	$(GO) -C hack/tools/figures run . -repo "$(abspath $(FIGURES_REPO))"

# The linters of .golangci.yml over the root module (hack/tools/* are modules of their own and not
# linted). Two workers: the machines this runs on have two cores. LINT_ARGS adds flags, e.g.
# LINT_ARGS='--new-from-rev=main' for what a branch adds.
LINT_ARGS ?=
lint: golangci-lint
	$(GOLANGCI_LINT) run --concurrency 2 $(LINT_ARGS) ./...
