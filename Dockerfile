# syntax=docker/dockerfile:1.7
# The restore-hooks product image, for linux/amd64 and linux/arm64: a multi-stage build of the
# binary WITHOUT the built-in API-server simulator (`--no-default-features` leaves out `demo` and
# its testbed), stripped, on distroless (nonroot, uid 65532). Build from the repository root:
#   docker build -t restore-hooks:dev .                                       # this machine's platform
#   docker buildx build --platform linux/amd64,linux/arm64 -t REPO:TAG --push .  # both
# .dockerignore keeps target/, .tools/ and .git out of the context.
#
# The build stage runs on the builder's own platform (BUILDPLATFORM) and cross-compiles for each
# TARGETPLATFORM with Debian's cross gcc (.ci/cross-build.sh says why), so an arm64 image is
# compiled natively fast instead of emulated under QEMU. The runtime stage is the target's.

ARG RUST_VERSION=1.95
ARG DEBIAN_RELEASE=bookworm

FROM --platform=$BUILDPLATFORM docker.io/library/rust:${RUST_VERSION}-${DEBIAN_RELEASE} AS build
ARG TARGETARCH
WORKDIR /src
# The toolchain for the target (the Rust target; for another architecture, Debian's cross gcc, libc
# and qemu-user, which runs the result once) in a layer of its own, before the sources, so that it
# is cached across source changes.
COPY .ci/cross-build.sh /usr/local/bin/cross-build
RUN cross-build toolchain "$TARGETARCH"
COPY . .
# One target dir per architecture: both builds run side by side without waiting on cargo's lock.
# The build checks the binary (architecture, stripped, only the libraries distroless ships, glibc
# symbols, `--version`) before it is installed at /out.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/usr/local/cargo/git \
    --mount=type=cache,id=restore-hooks-target-${TARGETARCH},target=/src/target \
    .ci/cross-build.sh build "$TARGETARCH" /out/restore-hooks

# glibc + libgcc, no shell, runs as 65532:65532 (matches the chart's securityContext). The same
# Debian release as the build stage, so the binary's glibc needs are met (cross-build checks them).
FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /out/restore-hooks /restore-hooks
USER 65532:65532
# Return freed memory at once (the chart sets the same): see src/main.rs.
ENV MIMALLOC_PURGE_DELAY=0
EXPOSE 8443 8080
ENTRYPOINT ["/restore-hooks"]
CMD ["serve"]
