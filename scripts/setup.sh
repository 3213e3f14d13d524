#!/usr/bin/env bash
# Installs what vkc needs on a fresh Debian/Ubuntu machine, only where it is missing:
# the Vulkan loader and Mesa's drivers (lavapipe when there is no GPU), spirv-tools (spirv-val in the
# tests; the cooperative-matrix modules are validated with the newer one in ../shared/tools where it
# exists), the Khronos validation layer (the runtime tests run under it), graphviz (CI renders DOT).
# Then fetches the Go modules. Safe to run again.
set -euo pipefail
need=()
check() { # check BINARY-OR-FILE PACKAGE
  if ! command -v "$1" >/dev/null 2>&1 && [ ! -e "$1" ]; then need+=("$2"); fi
}
check /usr/share/vulkan/icd.d/lvp_icd.x86_64.json mesa-vulkan-drivers
check /usr/lib/x86_64-linux-gnu/libvulkan.so.1 libvulkan1
check spirv-val spirv-tools
check /usr/share/vulkan/explicit_layer.d/VkLayer_khronos_validation.json vulkan-validationlayers
check dot graphviz
check gcc gcc
if [ "$(uname -m)" != x86_64 ]; then
  # The file checks above name x86_64 paths; elsewhere ask dpkg instead.
  need=()
  for p in mesa-vulkan-drivers libvulkan1 spirv-tools vulkan-validationlayers graphviz gcc; do
    dpkg -s "$p" >/dev/null 2>&1 || need+=("$p")
  done
fi
if [ ${#need[@]} -gt 0 ]; then
  echo "setup: installing ${need[*]}" >&2
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
if ! command -v go >/dev/null 2>&1; then
  echo "setup: Go 1.26 or newer is needed (https://go.dev/dl is not reachable from CI; install it from your distribution)" >&2
  exit 1
fi
cd "$(dirname "$0")/.."
go mod download
