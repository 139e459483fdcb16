#!/usr/bin/env bash
# The GitHub Action's install step: the released chatgate binary for this runner, its sha256
# checked against the release's own .sha256 file, kept in the runner's tool cache per version.
#   CHATGATE_VERSION     "0.1.0", "latest", or the path of a chatgate binary already here
#   CHATGATE_TOOL_CACHE  where versions are kept (the action passes $RUNNER_TOOL_CACHE/chatgate)
#   CHATGATE_RELEASES_URL  default https://github.com/chatgate/chatgate/releases (the archives
#                        are <url>/download/v<version>/chatgate-<target>.tar.xz, as dist names them)
# Writes `binary=<path>` to $GITHUB_OUTPUT (stdout when unset) and its folder to $GITHUB_PATH.
set -euo pipefail

version=${CHATGATE_VERSION:-latest}
cache=${CHATGATE_TOOL_CACHE:-${RUNNER_TOOL_CACHE:-$HOME/.cache}/chatgate}
releases=${CHATGATE_RELEASES_URL:-https://github.com/chatgate/chatgate/releases}
out=${GITHUB_OUTPUT:-/dev/stdout}

fail() { echo "chatgate install: $*" >&2; exit 2; }
# The binary as the step's output, and its folder on the job's PATH for later steps.
emit() {
  echo "binary=$1" >> "$out"
  if [ -n "${GITHUB_PATH:-}" ]; then dirname "$1" >> "$GITHUB_PATH"; fi
}

# A binary already on the runner (built in the same job, or this repository's own CI).
if [[ "$version" == */* ]]; then
  [ -x "$version" ] || fail "version is a path, but $version is not an executable file"
  emit "$(cd "$(dirname "$version")" && pwd)/$(basename "$version")"
  exit 0
fi

case "$(uname -s)/$(uname -m)" in
  Linux/x86_64) target=x86_64-unknown-linux-gnu ;;
  Linux/aarch64 | Linux/arm64) target=aarch64-unknown-linux-gnu ;;
  Darwin/arm64) target=aarch64-apple-darwin ;;
  Darwin/x86_64) target=x86_64-apple-darwin ;;
  *) fail "no release binary for $(uname -s)/$(uname -m); build one from a clone (cargo install --path .) and pass its path as version" ;;
esac

if [ "$version" = latest ]; then
  base="$releases/latest/download"
  dest="$cache/latest-$(date -u +%Y%m%d)"
else
  [[ "$version" =~ ^v?[0-9]+\.[0-9]+\.[0-9]+([-+][0-9A-Za-z.-]+)?$ ]] || fail "version \"$version\" is not a release number like 0.1.0, \"latest\" or a path"
  # The cache folder keeps the input as written (action.yml's cache step names it so); the
  # release tag always has its v.
  dest="$cache/$version"
  base="$releases/download/v${version#v}"
fi

if [ -x "$dest/chatgate" ] && "$dest/chatgate" --version >/dev/null 2>&1; then
  echo "chatgate install: using the cached $dest/chatgate ($("$dest/chatgate" --version))" >&2
  emit "$dest/chatgate"
  exit 0
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
archive="chatgate-$target.tar.xz"
fetch() {
  curl --fail --silent --show-error --location --retry 3 --connect-timeout 10 --max-time 300 \
    --output "$work/$1" "$base/$1" || fail "could not download $base/$1 (chatgate has no published release before v0.1.0: build it from a clone, cargo install --path ., and pass the binary's path as version)"
}
fetch "$archive"
fetch "$archive.sha256"

# The .sha256 file is "<hash>  <name>"; compare the hash alone (names differ across tools).
want=$(awk '{print $1; exit}' "$work/$archive.sha256")
if command -v sha256sum >/dev/null; then
  got=$(sha256sum "$work/$archive" | awk '{print $1}')
else
  got=$(shasum -a 256 "$work/$archive" | awk '{print $1}')
fi
[ -n "$want" ] && [ "$want" = "$got" ] || fail "$archive: sha256 $got does not match the release's $want; refusing to install it"

tar -xJf "$work/$archive" -C "$work"
binary=$(find "$work" -type f -name chatgate -perm -u+x | head -n 1)
[ -n "$binary" ] || fail "$archive holds no chatgate binary"
mkdir -p "$dest"
# A rename inside the cache folder: a concurrent job never sees half a binary.
cp "$binary" "$dest/.chatgate.tmp.$$" && mv -f "$dest/.chatgate.tmp.$$" "$dest/chatgate"
echo "chatgate install: $("$dest/chatgate" --version) for $target, sha256 $got" >&2
emit "$dest/chatgate"
