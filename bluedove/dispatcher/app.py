"""The dispatcher's FastAPI application, assembled in one place."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from typing import Any

import grpc
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from bluedove.core.errors import ApiError
from bluedove.core.filter_schema import filter_schema
from bluedove.core.space import Space
from bluedove.dispatcher.dispatcher import Dispatcher
from bluedove.dispatcher.errors import HTTP_HEADERS, STORE_ERRORS, as_api_error, http_status
from bluedove.dispatcher.routes import cluster, hot, messages, queues, spaces, stats, subscriptions
from bluedove.runtime.settings import DispatcherSettings

log = logging.getLogger("bluedove.dispatcher")


def error_response(err: ApiError, headers: Mapping[str, str] | None = None) -> JSONResponse:
    """docs/api.md's error body with its status, and the headers that status calls for."""
    status = http_status(err)
    return JSONResponse(err.body(), status_code=status, headers={**HTTP_HEADERS.get(status, {}), **(headers or {})})


def answer_for(exc: BaseException, method: str, path: str) -> JSONResponse:
    """The error answer for `exc`: its API error, or for anything unforeseen a 500 in
    docs/api.md's error shape, logged (the app's last-resort handler, and the door's polls)."""
    err = as_api_error(exc)
    if err is not None:
        return error_response(err, err.headers)
    log.error("unhandled error on %s %s: %r", method, path, exc)
    return error_response(ApiError(500, "internal", "the dispatcher failed on this request"))


def create_app(settings: DispatcherSettings, space: Space, address: str = "",
               seeds: tuple[str, ...] = ()) -> FastAPI:
    """The app; `seeds`: gossip addresses to try first (`--join`), besides the table's members."""
    dispatcher = Dispatcher(settings, space, seeds)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await dispatcher.start(address or f"{settings.host}:{settings.http_port}")
        yield
        await dispatcher.stop()

    app = FastAPI(title="BlueDove", version="1", lifespan=lifespan,
                  description="Elastic attribute-based publish/subscribe. See docs/api.md.")
    app.state.dispatcher = dispatcher
    app.openapi = with_predicates(app, space)  # type: ignore[method-assign]

    async def api_error(request: Request, exc: Exception) -> JSONResponse:
        err = as_api_error(exc)
        assert err is not None  # registered only for the classes as_api_error maps
        return error_response(err, err.headers)

    # An API error, and what stands for one: the store or a matcher unreachable.
    for cls in (ApiError, grpc.aio.AioRpcError, *STORE_ERRORS):
        app.add_exception_handler(cls, api_error)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        # Starlette's headers (`Allow` on a 405) are kept.
        return error_response(ApiError(exc.status_code, code, str(exc.detail)), getattr(exc, "headers", None))

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0] if exc.errors() else {}
        field = ".".join(str(p) for p in first.get("loc", ())[1:]) or None
        return error_response(ApiError(422, "invalid_request", first.get("msg", "invalid request"), field))

    @app.exception_handler(Exception)
    async def internal_error(request: Request, exc: Exception) -> JSONResponse:
        # Anything unforeseen still answers in docs/api.md's error shape (uvicorn logs the traceback).
        return answer_for(exc, request.method, request.url.path)

    for r in (queues.router, subscriptions.router, messages.router, cluster.router, stats.router, spaces.router):
        app.include_router(r)
    app.add_middleware(hot.HotRoutes)  # publish, poll and ack without FastAPI's per-request layers
    return app


def with_predicates(app: FastAPI, space: Space) -> Callable[[], dict[str, Any]]:
    """FastAPI's OpenAPI document with `Predicates`, the filter language's schema for `space`,
    among its components (the subscription routes refer to it)."""
    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            doc = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
            doc.setdefault("components", {}).setdefault("schemas", {})["Predicates"] = filter_schema(space)
            app.openapi_schema = doc
        return app.openapi_schema
    return openapi
