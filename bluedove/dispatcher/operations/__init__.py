"""The public API's operations, one function each, shared by the REST routes and the gRPC
servicer, by resource: queues (and receiving), subscriptions, publishing (the one path of every
transport); and the operational ones, readiness and the cluster view. Each takes the
`Dispatcher` (bluedove/dispatcher/dispatcher.py) first.
"""

from bluedove.dispatcher.operations.cluster import cluster_view, readiness
from bluedove.dispatcher.operations.common import check_range, require_queue_token
from bluedove.dispatcher.operations.publish import (
    admit,
    gate,
    publish,
    publish_parsed,
    publish_rest,
    publish_rest_batch,
    publish_stream,
)
from bluedove.dispatcher.operations.queues import (
    DEFAULT_LISTEN_MAX,
    DEFAULT_POLL_MAX,
    ack,
    create_queue,
    delete_queue,
    listen,
    poll,
    poll_args,
    poll_error,
    poll_json,
    queue_info,
)
from bluedove.dispatcher.operations.subscriptions import (
    get_subscription,
    subscribe,
    subscribe_batch,
    unsubscribe,
    update_subscription,
)

__all__ = ["DEFAULT_LISTEN_MAX", "DEFAULT_POLL_MAX", "ack", "admit", "check_range", "cluster_view", "create_queue",
           "delete_queue", "gate", "get_subscription", "listen", "poll", "poll_args", "poll_error", "poll_json",
           "publish", "publish_parsed", "publish_rest", "publish_rest_batch", "publish_stream", "queue_info",
           "readiness", "require_queue_token", "subscribe", "subscribe_batch", "unsubscribe", "update_subscription"]
