# syntax=docker/dockerfile:1
#
# ferry container image: the static ferry binary on debian:bookworm-slim,
# with fuse3 (ferry unmounts through fusermount3) and CA certificates (HTTPS
# to GCS and S3).
#
# Build (needs a Docker engine with BuildKit, the default since Docker 23):
#
#   docker build -t ferry .
#
# Run. The mount is made inside the container, in a subdirectory of an
# rshared bind mount, and so appears on the host at /mnt/ferry/data
# (mkdir -p /mnt/ferry/data on the host first):
#
#   docker run --rm --device /dev/fuse --cap-add SYS_ADMIN \
#     --security-opt apparmor=unconfined \
#     -v /ssd/ferry-cache:/cache -v /mnt/ferry:/mnt/ferry:rshared \
#     ferry --cache-dir /cache --allow-other gs://bucket /mnt/ferry/data
#
#   --device /dev/fuse        the FUSE device ferry serves the file system on
#   --cap-add SYS_ADMIN       mount(2) needs it, even for FUSE
#   --security-opt apparmor=unconfined
#                             Docker's default AppArmor profile denies mount
#   :rshared                  propagate the mount from the container to the
#                             host (the default, rprivate, keeps it inside);
#                             bind the parent, not the mount point, so that
#                             a ferry restarted after a crash reaches the host
#   --allow-other             let host users other than root read the mount
#
# or replace the first three options with --privileged. docs/containers.md
# explains each option, Kubernetes and systemd.
#
# PID 1: the entrypoint is ferry itself, in the foreground. It handles
# SIGTERM and SIGINT (a PID 1 without handlers would ignore them) by
# unmounting and exiting 0, and it waits for the only processes it starts
# (fusermount3), so no init process is needed. Use `docker run --init` if
# you `docker exec` commands that leave orphans behind for PID 1 to reap.
#
# No credentials are baked in, and none may be: give them at run time (a
# mounted key file with --key-file, GOOGLE_APPLICATION_CREDENTIALS, AWS_*
# environment variables from a secret store, or the cloud metadata server).

FROM golang:1.26-bookworm AS build
WORKDIR /src
# Modules first, so that a source change does not download them again.
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
# CGO_ENABLED=0 gives a static binary: it runs on any base image and on the
# host. -trimpath and -s -w keep build paths and symbols out of it.
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o /out/ferry .

FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends fuse3 ca-certificates \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /out/ferry /usr/local/bin/ferry
# /sbin/mount.ferry, so that `mount -t ferry` works inside the container too.
# Running the binary here also proves it starts on this base image.
RUN ["/usr/local/bin/ferry", "install-helper"]
# Foreground: as a container's main process ferry must not daemonize, or
# the container would exit as soon as the mount is up.
ENTRYPOINT ["/usr/local/bin/ferry", "--foreground"]
CMD ["--help"]
# The signal ferry unmounts on. `docker stop` waits 10 s by default before
# SIGKILL; a mount with files still open needs longer (docker stop -t 30).
STOPSIGNAL SIGTERM
