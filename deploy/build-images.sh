#!/usr/bin/env bash
# Builds the images of the local stack (compose.yaml) from binaries compiled
# on this machine. No registry is needed: every image is FROM scratch.
#
#   deploy/build-images.sh                    # every image
#   deploy/build-images.sh dedup nexmark-q7   # only these targets
#   deploy/build-images.sh --jaeger-binary    # only build (or find) the cached
#                                             # Jaeger binary and print its path;
#                                             # needs Go, not Docker
#
# Targets (deploy/Dockerfile) and the images they make:
#   nats         weir/nats:dev         nats-server from the module's go.mod
#   nexmark-gen  weir/nexmark-gen:dev
#   dedup        weir/dedup:dev
#   nexmark-q5   weir/nexmark-q5:dev
#   nexmark-q7   weir/nexmark-q7:dev
#   nexmark-q8   weir/nexmark-q8:dev
#   nexmark-q11  weir/nexmark-q11:dev
#   coordinator  weir/coordinator:dev  checkpoint coordinator (any pipeline)
#   jaeger       weir/jaeger:dev       Jaeger v2, built once and cached
#
# Environment:
#   WEIR_IMAGE_PREFIX    image name prefix (default weir)
#   WEIR_IMAGE_TAG       image tag (default dev)
#   WEIR_JAEGER_VERSION  Jaeger module version (default v1.76.0, Jaeger 2.13)
#   WEIR_JAEGER_BIN      a jaeger binary to use instead of building one
#   WEIR_CACHE_DIR       where the Jaeger build is cached
#                        (default ${XDG_CACHE_HOME:-$HOME/.cache}/weir)
#
# The first Jaeger build compiles several hundred modules: 10-30
# minutes on two cores. Later runs reuse the cached binary; the rest of the
# build takes about a minute.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
prefix=${WEIR_IMAGE_PREFIX:-weir}
tag=${WEIR_IMAGE_TAG:-dev}
jaeger_version=${WEIR_JAEGER_VERSION:-v1.76.0}
cache=${WEIR_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/weir}

# The images are the Dockerfile's targets (generated from the contracts by
# go run ./deploy/cmd/generate), but for the stages the others build on.
mapfile -t all < <(sed -n 's/^FROM [^ ]* AS \([a-z0-9-]*\)$/\1/p' "$root/deploy/Dockerfile" | grep -v '^weir-')
jaeger_only=false
if [ "${1:-}" = --jaeger-binary ]; then
	jaeger_only=true
	shift
fi
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
	targets=("${all[@]}")
fi
for t in "${targets[@]}"; do
	case " ${all[*]} " in
	*" $t "*) ;;
	*) echo "build-images: unknown target $t (targets: ${all[*]})" >&2; exit 2 ;;
	esac
done
want() { case " ${targets[*]} " in *" $1 "*) return 0 ;; esac; return 1; }

log() { printf 'build-images: %s\n' "$*" >&2; }

export CGO_ENABLED=0 GOOS=linux GOARCH="${GOARCH:-$(go env GOARCH)}"
gobuild=(go build -trimpath -ldflags='-s -w')
# What ships is built with -tags release: the weir CLI without its
# development harness (weir demo, bench, chaos) and the embedded test
# server it runs (cmd/weir/harness.go; TestReleaseLinksNoHarness).
release=("${gobuild[@]}" -tags release)

# ---- Jaeger, built outside this module and cached -----------------------------
# `go install jaeger@version` refuses modules with replace directives, so
# the module's source is copied out of the module cache and built in place.
jaeger_bin() {
	if [ -n "${WEIR_JAEGER_BIN:-}" ]; then
		echo "$WEIR_JAEGER_BIN"
		return
	fi
	local out="$cache/jaeger-$jaeger_version-$GOOS-$GOARCH/jaeger"
	if [ -x "$out" ]; then
		log "using cached $out"
		echo "$out"
		return
	fi
	log "building Jaeger $jaeger_version (cold: 10-30 minutes; cached afterwards in $cache)"
	local start=$SECONDS work dir
	work=$(mktemp -d "${TMPDIR:-/tmp}/weir-jaeger.XXXXXX")
	dir=$(cd "$work" && GOFLAGS=-mod=mod GOWORK=off go mod download -json \
		"github.com/jaegertracing/jaeger@$jaeger_version" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
	if [ -z "$dir" ]; then
		log "go mod download github.com/jaegertracing/jaeger@$jaeger_version gave no source directory"
		rm -rf "$work"
		exit 1
	fi
	cp -r "$dir" "$work/src"
	chmod -R u+w "$work/src"
	mkdir -p "$(dirname "$out")"
	(cd "$work/src" && GOFLAGS=-mod=mod GOWORK=off "${gobuild[@]}" -o "$out.tmp" ./cmd/jaeger) || {
		rm -rf "$work" "$out.tmp"
		exit 1
	}
	mv "$out.tmp" "$out"
	rm -rf "$work"
	log "built Jaeger in $((SECONDS - start))s"
	echo "$out"
}

if $jaeger_only; then
	command -v go >/dev/null || { echo "build-images: go is not installed" >&2; exit 1; }
	jaeger_bin
	exit 0
fi
for tool in go docker; do
	command -v "$tool" >/dev/null || { echo "build-images: $tool is not installed" >&2; exit 1; }
done

ctx=$(mktemp -d "${TMPDIR:-/tmp}/weir-images.XXXXXX")
trap 'rm -rf "$ctx"' EXIT
mkdir -p "$ctx/bin" "$ctx/contracts" "$ctx/empty"

# ---- binaries of this module -------------------------------------------------
start=$SECONDS
log "compiling weir binaries ($GOOS/$GOARCH)"
(
	cd "$root"
	# Every service's binary (services/<name>/cmd/<name>) and the CLI.
	"${release[@]}" -o "$ctx/bin/" ./services/*/cmd/* ./dispatcher/cmd/dispatcher ./cmd/weir
	"${release[@]}" -o "$ctx/bin/weir-healthcheck" ./deploy/healthcheck
	# Docker without BuildKit builds every stage before the target, and the
	# nats stage needs its binary: compile it whatever the targets.
	"${gobuild[@]}" -o "$ctx/bin/nats-server" github.com/nats-io/nats-server/v2
)
cp "$root"/contracts/*.yaml "$ctx/contracts/"
cp "$root/deploy/nats.conf" "$ctx/nats.conf"

# ---- the stack's secrets -------------------------------------------------------
# compose.yaml runs NATS with mutual TLS, JetStream encrypted at rest and
# one least-privilege user per process (docs/SECURITY.md): their nkey
# seeds, a local CA with the server's certificate and one client
# certificate per process, the key of the store's encryption, and the key
# that seals checkpoints, in deploy/secrets (kept out of git). Each
# container mounts read-only its own seed, certificate and key, never
# another's. No secret is readable by anyone but its owner (0600), and the
# containers run as that owner: as root, the files are given to the
# images' user 65532; as another user, the images are built to run as that
# user. Run again, it keeps the seeds, the CA, the keys, and adds the users
# of new contracts.
secrets="$root/deploy/secrets"
if [ "$(id -u)" -eq 0 ]; then
	uid=65532
else
	uid=$(id -u)
fi
(
	cd "$root"
	auth=(-contract shipped -out "$secrets" -seen-as /secrets -client-certs -store-key -producers compose -account-storage 16GiB)
	[ -f "$secrets/tls/ca.pem" ] || auth+=(-tls-hosts nats,localhost,127.0.0.1)
	[ -f "$secrets/checkpoint.keys" ] || auth+=(-checkpoint-key k1)
	go run ./cmd/weir auth "${auth[@]}" >/dev/null
	# What a stack made by an older build-images.sh left readable.
	chmod 700 "$secrets" "$secrets/tls"
	chmod 600 "$secrets"/*.nk "$secrets"/tls/*-key.pem "$secrets/checkpoint.keys" "$secrets/nats-store.env"
	if [ "$(id -u)" -eq 0 ]; then
		chown -R "$uid:$uid" "$secrets"
	fi
)
log "secrets in $secrets"
cp "$root/deploy/Dockerfile" "$ctx/Dockerfile"
log "compiled in $((SECONDS - start))s"

# ---- images ---------------------------------------------------------------------
build() {
	local t=$1 start=$SECONDS out
	if ! out=$(docker build -f "$ctx/Dockerfile" --build-arg "WEIR_UID=$uid" --target "$t" -t "$prefix/$t:$tag" "$ctx" 2>&1); then
		printf '%s\n' "$out" >&2
		log "docker build --target $t failed"
		exit 1
	fi
	log "image $prefix/$t:$tag ($((SECONDS - start))s)"
}
for t in "${targets[@]}"; do
	if [ "$t" != jaeger ]; then
		build "$t"
	fi
done
# Last: the context grows by the Jaeger binary and the trace UI only for the
# Jaeger image.
if want jaeger; then
	bin=$(jaeger_bin)
	cp "$bin" "$ctx/bin/jaeger"
	cp -R "$root/deploy/jaeger-ui" "$ctx/jaeger-ui"
	build jaeger
fi
