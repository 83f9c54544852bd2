# syntax=docker/dockerfile:1.7
# The restore-hooks product image: a multi-stage build of the binary WITHOUT the built-in API-server
# simulator (`--no-default-features` leaves out `demo` and its testbed), stripped, on distroless
# (nonroot, uid 65532). Build from the repository root:
#   docker build -t restore-hooks:dev .
# .dockerignore keeps target/, .tools/ and .git out of the context.

ARG RUST_VERSION=1.95
ARG DEBIAN_RELEASE=bookworm

FROM docker.io/library/rust:${RUST_VERSION}-${DEBIAN_RELEASE} AS build
WORKDIR /src
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/usr/local/cargo/git \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked -p restore-hooks --bin restore-hooks --no-default-features \
 && install -D -m 0755 target/release/restore-hooks /out/restore-hooks \
 && strip /out/restore-hooks \
 && /out/restore-hooks --version

# glibc + libgcc, no shell, runs as 65532:65532 (matches the chart's securityContext).
FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /out/restore-hooks /restore-hooks
USER 65532:65532
# Return freed memory at once (the chart sets the same): see src/main.rs.
ENV MIMALLOC_PURGE_DELAY=0
EXPOSE 8443 8080
ENTRYPOINT ["/restore-hooks"]
CMD ["serve"]
