"""Names vulture cannot see used: frameworks call them (tests/unit/test_hygiene.py)."""

# FastAPI routes and exception handlers, registered by decorators
http_error, validation_error, internal_error  # bluedove/dispatcher/app.py
get_space, get_cluster, dashboard, dashboard_asset, healthz, readyz  # bluedove/dispatcher/routes/cluster.py
get_stats  # bluedove/dispatcher/routes/stats.py
list_spaces  # bluedove/dispatcher/routes/spaces.py (its get_space is cluster.py's name)
# gRPC servicer methods, called by the generated stubs' names
GetSpace  # bluedove/dispatcher/grpc_api.py
# dataclass fields read by name (getattr, asdict)
per_dimension  # bluedove/lab/sim/costmodel.py Models
span_s  # bluedove/lab/sim/engine.py RunResult
# pytest reads a module's marks from this name
pytestmark
# pytest hooks, called by name
pytest_collection_modifyitems  # tests/browser/conftest.py
pytest_addoption  # tests/conftest.py (--store-kind)
pytest_xdist_make_scheduler, _split_scope  # tests/conftest.py: the two workers' scheduler, called by xdist
# shlex reads it while it splits (split on blanks, not on shell words' punctuation)
whitespace_split  # tests/deploy/test_dockerfile.py
# uvicorn.Server reads them: its exit flag, and the hook overridden to keep the process's signal handlers
should_exit, capture_signals  # bluedove/runtime/telemetry.py
pytest_configure  # tests/conftest.py (--store-kind for start_cluster, through the environment)
pytest_sessionfinish  # tests/conftest.py: processes the tests left running, stopped at the end
# uvicorn's HTTP protocol calls them: its pipelined-request queue, its flow control's hooks
appendleft, pause_writing, resume_writing  # bluedove/dispatcher/door.py _Pipeline, LeanFlow
# asyncio's stream writer calls them: a fake of one over a torn-down transport
writelines, wait_closed  # tests/unit/store/test_closed_writes.py TornDown
