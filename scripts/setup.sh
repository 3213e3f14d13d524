#!/usr/bin/env bash
# Installs what vkc needs on a fresh Debian/Ubuntu machine, only where it is missing:
# the Vulkan loader and Mesa's drivers (lavapipe when there is no GPU), spirv-tools (spirv-val in the
# tests; the cooperative-matrix modules are validated with the newer one in ../shared/tools where it
# exists), the Khronos validation layer (the runtime tests run under it), graphviz (CI renders DOT),
# curl and haproxy (the server's tests);
# on Debian 12, Mesa 25 from bookworm-backports (see below; VKC_SYSTEM_MESA=1 keeps the system's).
# Then fetches the Go modules. Safe to run again.
set -euo pipefail
need=()
check() { # check BINARY-OR-FILE PACKAGE
  if ! command -v "$1" >/dev/null 2>&1 && [ ! -e "$1" ]; then need+=("$2"); fi
}
# Mesa 22 names lavapipe's ICD file lvp_icd.x86_64.json, Mesa 25 lvp_icd.json.
[ -e /usr/share/vulkan/icd.d/lvp_icd.json ] || check /usr/share/vulkan/icd.d/lvp_icd.x86_64.json mesa-vulkan-drivers
check /usr/lib/x86_64-linux-gnu/libvulkan.so.1 libvulkan1
check spirv-val spirv-tools
check /usr/share/vulkan/explicit_layer.d/VkLayer_khronos_validation.json vulkan-validationlayers
check dot graphviz
check gcc gcc
# The server's tests: curl as a user tries it, haproxy -c on deploy/haproxy.cfg.
check curl curl
check haproxy haproxy
if [ "$(uname -m)" != x86_64 ]; then
  # The file checks above name x86_64 paths; elsewhere ask dpkg instead.
  need=()
  for p in mesa-vulkan-drivers libvulkan1 spirv-tools vulkan-validationlayers graphviz gcc curl haproxy; do
    dpkg -s "$p" >/dev/null 2>&1 || need+=("$p")
  done
fi
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
if [ ${#need[@]} -gt 0 ]; then
  echo "setup: installing ${need[*]}" >&2
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

# Debian 12's Mesa is 22.3; bookworm-backports has 25.x, whose lavapipe the tests are run on
# (integer dot products and the other kernels' paths as a current driver compiles them). The
# backports suite is added, when no apt source names it yet, from the mirror the machine's own
# bookworm source uses (deb822 .sources files or sources.list): no host is written here.
backports_uri() { # prints "URI<TAB>SIGNED-BY" of the first enabled bookworm main source
  local f
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -e "$f" ] || continue
    awk 'BEGIN { RS = ""; FS = "\n" }
      {
        types = ""; uris = ""; suites = ""; comps = ""; signed = ""; enabled = "yes"
        for (i = 1; i <= NF; i++) {
          line = $i
          if (line ~ /^[ \t]*#/ || index(line, ":") == 0) continue
          key = substr(line, 1, index(line, ":") - 1); val = substr(line, index(line, ":") + 1)
          gsub(/^[ \t]+|[ \t]+$/, "", val)
          if (key == "Types") types = val; else if (key == "URIs") uris = val
          else if (key == "Suites") suites = val; else if (key == "Components") comps = val
          else if (key == "Signed-By") signed = val; else if (key == "Enabled") enabled = val
        }
        if (enabled != "no" && (" " types " ") ~ / deb / && (" " suites " ") ~ / bookworm / && (" " comps " ") ~ / main /) {
          split(uris, u, /[ \t]+/)
          if (signed !~ /^\//) signed = ""
          printf "%s\t%s\n", u[1], signed
          exit
        }
      }' "$f" | head -n1 | grep . && return 0
  done
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [ -e "$f" ] || continue
    awk '$1 == "deb" {
        signed = ""; i = 2
        if ($2 ~ /^\[/) {
          for (; i <= NF; i++) {
            if ($i ~ /signed-by=/) { signed = $i; sub(/.*signed-by=/, "", signed); sub(/\]$/, "", signed) }
            if ($i ~ /\]$/) { i++; break }
          }
        }
        uri = $i; suite = $(i + 1); comps = ""
        for (j = i + 2; j <= NF; j++) comps = comps " " $j
        if (suite == "bookworm" && (comps " ") ~ / main /) { printf "%s\t%s\n", uri, signed; exit }
      }' "$f" | head -n1 | grep . && return 0
  done
  return 1
}
mesa_from_backports() {
  [ -r /etc/os-release ] || return 0
  local id codename have src uri signed
  id=$(. /etc/os-release && echo "${ID:-}"); codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
  [ "$id" = debian ] && [ "$codename" = bookworm ] || return 0
  have=$(dpkg-query -W -f='${Version}' mesa-vulkan-drivers 2>/dev/null || true)
  if [ -n "$have" ] && dpkg --compare-versions "$have" ge 25; then return 0; fi
  if ! grep -rqsE '(^|[[:space:]])bookworm-backports([[:space:]]|$)' /etc/apt/sources.list /etc/apt/sources.list.d/; then
    if ! src=$(backports_uri); then
      echo "setup: no bookworm apt source to take the bookworm-backports mirror from; Mesa stays $have" >&2
      return 0
    fi
    uri=${src%%$'\t'*}; signed=${src#*$'\t'}
    echo "setup: adding bookworm-backports from $uri (for Mesa 25's lavapipe)" >&2
    {
      printf 'Types: deb\nURIs: %s\nSuites: bookworm-backports\nComponents: main\n' "$uri"
      [ -n "$signed" ] && printf 'Signed-By: %s\n' "$signed"
    } | $SUDO tee /etc/apt/sources.list.d/vkc-bookworm-backports.sources >/dev/null
  fi
  echo "setup: installing mesa-vulkan-drivers from bookworm-backports (Mesa ${have:-none} here)" >&2
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends -t bookworm-backports mesa-vulkan-drivers >/dev/null
}
[ "${VKC_SYSTEM_MESA:-}" = 1 ] || mesa_from_backports
if ! command -v go >/dev/null 2>&1; then
  echo "setup: Go 1.26 or newer is needed (https://go.dev/dl is not reachable from CI; install it from your distribution)" >&2
  exit 1
fi
cd "$(dirname "$0")/.."
go mod download
