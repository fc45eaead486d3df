# syntax=docker/dockerfile:1
# dlq-operator container image: built with cargo, run as a distroless non-root image.
#
#   docker build -t dlq-operator:0.1.0 .
#
# Not built by this repository's CI (its machines run no container engine); the chart's
# Deployment runs this image as uid 65532 with a read-only root filesystem.

FROM rust:1.95-bookworm AS build
WORKDIR /src
# Dependencies first, so that a source change does not rebuild them.
COPY Cargo.toml Cargo.lock ./
COPY benches ./benches
RUN mkdir src && echo 'fn main() {}' > src/main.rs && touch src/lib.rs \
    && cargo build --release --locked --bin dlq-operator \
    && rm -rf src
COPY src ./src
# The console's pages and stylesheet (askama templates and include_str!, read at compile time).
COPY templates ./templates
RUN touch src/main.rs src/lib.rs \
    && cargo build --release --locked --bin dlq-operator \
    && cp target/release/dlq-operator /dlq-operator

# glibc and CA certificates, no shell, no package manager; user 65532 (nonroot).
FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /dlq-operator /usr/local/bin/dlq-operator
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/dlq-operator"]
CMD ["run", "--log-format=json"]
