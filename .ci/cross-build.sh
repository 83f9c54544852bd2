#!/usr/bin/env bash
# Builds the product binary (restore-hooks without the `demo` feature, stripped) for one Linux
# architecture, natively or cross-compiled from the machine it runs on. The Dockerfile's build
# stage runs it on BuildKit's BUILDPLATFORM once per TARGETPLATFORM; outside Docker it runs the
# same way, which is how an arm64 build is checked on a machine without a container runtime.
#
#   .ci/cross-build.sh toolchain ARCH      install what building for ARCH needs (root, Debian):
#                                          the Rust target, and for another architecture than the
#                                          machine's, Debian's cross gcc and libc (ring and
#                                          mimalloc compile C; the binary links glibc and libgcc)
#                                          and qemu-user (to run the result once)
#   .ci/cross-build.sh build ARCH OUT      cargo build --release --locked --no-default-features
#                                          for ARCH, then check the result and install it at OUT
#
# PROFILE=dev runs the same build and checks with the dev profile: how the cross toolchain is
# checked on a shared machine where release builds are too slow (the image always uses release).
#
# ARCH is Docker's TARGETARCH: amd64 or arm64. The checks after the build: an ELF of ARCH, no
# symbol table or debug sections left, only the shared libraries distroless/cc ships, no glibc
# symbol newer than the build's own glibc (the runtime image's Debian release must be the same),
# and `restore-hooks --version` prints the crate's version when the machine can run it (natively,
# or through qemu-user when Debian's qemu-user is installed).
#
# Why Debian's cross gcc and not cargo-zigbuild: the build image (rust:*-bookworm) and the runtime
# image (distroless cc-debian12) are the same Debian release, so linking against that release's
# own glibc for arm64 gives a binary whose glibc needs match the runtime by construction, with
# packages from the distribution's archive and no second toolchain to pin.
set -euo pipefail

die() { printf 'cross-build: %s\n' "$*" >&2; exit 1; }
log() { printf '[cross-build] %s\n' "$*"; }

usage="usage: cross-build.sh toolchain ARCH | build ARCH OUT   (ARCH: amd64 or arm64)"
[ $# -ge 2 ] || die "$usage"
cmd=$1 arch=$2

# Docker's architecture name -> the Rust target, the GNU triple (cross gcc's prefix), Debian's
# architecture name (libc6-dev-<arch>-cross) and what readelf calls the machine.
case $arch in
  amd64) triple=x86_64-unknown-linux-gnu gnu=x86_64-linux-gnu deb=amd64 machine='Advanced Micro Devices X86-64' qemu=qemu-x86_64 ;;
  arm64) triple=aarch64-unknown-linux-gnu gnu=aarch64-linux-gnu deb=arm64 machine='AArch64' qemu=qemu-aarch64 ;;
  *) die "unsupported ARCH '$arch': the image is built for amd64 and arm64" ;;
esac

host_deb=$(dpkg --print-architecture 2>/dev/null) || die "dpkg not found: this script expects a Debian build machine (rust:*-bookworm)"
cross=0
[ "$host_deb" = "$deb" ] || cross=1

case $cmd in
toolchain)
  [ $# -eq 2 ] || die "$usage"
  if rustup target list --installed | grep -qx "$triple"; then
    log "Rust target $triple already installed"
  else
    log "rustup target add $triple"
    rustup target add "$triple"
  fi
  if [ $cross = 1 ]; then
    # Debian names the cross compiler after the GNU triple with '_' spelled '-'.
    # qemu-user runs the cross-built binary's --version before it goes into the image.
    pkgs=("gcc-${gnu//_/-}" "libc6-dev-${deb}-cross" qemu-user)
    # dpkg-query prints nothing for a package it never saw: count the installed ones.
    installed=$(dpkg-query -W -f='${Status}\n' "${pkgs[@]}" 2>/dev/null | grep -cx 'install ok installed' || true)
    if [ "$installed" != "${#pkgs[@]}" ]; then
      [ "$(id -u)" = 0 ] || die "installing ${pkgs[*]} needs root (apt-get)"
      log "apt-get install ${pkgs[*]}"
      DEBIAN_FRONTEND=noninteractive apt-get update -qq
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${pkgs[@]}" >/dev/null
    else
      log "${pkgs[*]} already installed"
    fi
  fi
  ;;
build)
  [ $# -eq 3 ] || die "$usage"
  out=$3
  root=$(cd "$(dirname "$0")/.." && pwd)
  cd "$root"
  if [ $cross = 1 ]; then
    command -v "${gnu}-gcc" >/dev/null || die "${gnu}-gcc not found: run '.ci/cross-build.sh toolchain $arch' first"
    # cargo's linker and the cc crate's compiler and archiver for the target (ring, mimalloc).
    upper=$(printf '%s' "$triple" | tr 'a-z-' 'A-Z_')
    export "CARGO_TARGET_${upper}_LINKER=${gnu}-gcc"
    export "CC_${triple//-/_}=${gnu}-gcc" "AR_${triple//-/_}=${gnu}-ar"
  fi
  profile=${PROFILE:-release}
  case $profile in
    release) profile_dir=release ;;
    dev) profile_dir=debug ;;
    *) die "PROFILE must be release or dev, not '$profile'" ;;
  esac
  # Stripped by the linker (--strip-all), whatever the architecture: no per-target strip binary.
  export "CARGO_PROFILE_${profile^^}_STRIP=symbols"
  log "cargo build --profile $profile --target $triple (build machine: $host_deb)"
  cargo build --profile "$profile" --locked -p restore-hooks --bin restore-hooks --no-default-features --target "$triple"
  bin="${CARGO_TARGET_DIR:-target}/$triple/$profile_dir/restore-hooks"
  [ -f "$bin" ] || die "cargo reported success but $bin is missing"

  headers=$(readelf -h "$bin") || die "$bin is not an ELF file"
  got=$(sed -n 's/^ *Machine: *//p' <<<"$headers")
  [ "$got" = "$machine" ] || die "$bin is built for '$got', not $arch ('$machine')"
  if readelf -S -W "$bin" | grep -qE ' \.(symtab|debug_[a-z]+) '; then
    die "$bin still has a symbol table or debug sections: it was not stripped"
  fi
  # distroless/cc-debian12 ships glibc and libgcc; any other shared library would be missing at run time.
  needed=$(readelf -d "$bin" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | sort | tr '\n' ' ')
  for lib in $needed; do
    case $lib in
      libc.so.6 | libm.so.6 | libgcc_s.so.1 | libpthread.so.0 | libdl.so.2 | librt.so.1 | ld-linux-*.so.*) ;;
      *) die "$bin needs $lib, which gcr.io/distroless/cc-debian12 does not ship (needed: $needed)" ;;
    esac
  done
  # The newest glibc symbol version the binary needs must exist in the build's own glibc (the
  # runtime image's Debian release is the build image's, so equal glibc versions).
  sysroot_glibc=$(ldd --version | sed -n '1s/.* \([0-9][0-9.]*\)$/\1/p')
  newest=$(readelf -V -W "$bin" | grep -oE 'GLIBC_[0-9]+\.[0-9]+' | sed 's/GLIBC_//' | sort -V | tail -1)
  if [ -n "$newest" ] && [ -n "$sysroot_glibc" ] && [ "$(printf '%s\n%s\n' "$newest" "$sysroot_glibc" | sort -V | tail -1)" != "$sysroot_glibc" ]; then
    die "$bin needs GLIBC_$newest, newer than this Debian release's glibc $sysroot_glibc"
  fi
  log "$bin: ELF $machine, stripped, needs ${needed% } (glibc symbols up to ${newest:-none}; build glibc $sysroot_glibc)"

  want=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -1)
  run=()
  if [ $cross = 0 ]; then
    run=("$bin")
  elif command -v "$qemu" >/dev/null; then
    run=("$qemu" -L "/usr/${gnu}" "$bin")
  fi
  if [ ${#run[@]} -gt 0 ]; then
    version=$("${run[@]}" --version) || die "'${run[*]} --version' failed"
    [ "$version" = "restore-hooks $want" ] || die "'${run[*]} --version' printed '$version', want 'restore-hooks $want'"
    log "${run[*]} --version: $version"
  else
    log "not run: this $host_deb machine cannot run an $arch binary (no $qemu; Debian: apt-get install qemu-user)"
  fi
  install -D -m 0755 "$bin" "$out"
  log "installed $out"
  ;;
*) die "$usage" ;;
esac
