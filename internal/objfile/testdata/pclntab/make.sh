#!/bin/sh
# Makes the pclntab fixtures: main.go.txt (named so that no build of the
# repository compiles it) built by one toolchain of each pclntab layout
# before Go 1.20's — 1.2–1.15 (go1.15.15), 1.16–1.17 (go1.16.15),
# 1.18–1.19 (go1.19.13) — fetched through the module proxy; static,
# without symbols (-ldflags=-s) and without paths (-trimpath: the same
# bytes every time); each binary's .gopclntab kept, gzipped. Their .text
# is at 0x401000, the linker's default, where the test reads them. Run
# from this directory; it needs the network, objcopy and readelf. The
# tests need none of them: the fixtures are committed.
set -eu
here=$(pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp main.go.txt "$work/main.go"
for v in go1.15.15 go1.16.15 go1.19.13; do
	GOTOOLCHAIN=$v go version >/dev/null 2>&1 || true # downloads it
	root=$(go env GOMODCACHE)/golang.org/toolchain@v0.0.1-$v.linux-amd64
	(cd "$work" && GOENV=off GO111MODULE=off CGO_ENABLED=0 GOROOT="$root" GOTOOLCHAIN=local \
		"$root/bin/go" build -trimpath -ldflags=-s -o "pcln-$v" main.go)
	readelf -SW "$work/pcln-$v" | grep -q ' \.text  *PROGBITS  *0000000000401000 ' || { echo "$v: .text is not at 0x401000" >&2; exit 1; }
	objcopy -O binary --only-section=.gopclntab "$work/pcln-$v" "$work/$v.gopclntab"
	gzip -9 -n -c "$work/$v.gopclntab" >"$here/$v.gopclntab.gz"
done
