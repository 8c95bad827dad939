"""The Python SDK: `Client` and `AsyncClient` over REST (http://) or gRPC (grpc://)."""

from bluedove.client.client import AsyncClient, Client
from bluedove.client.errors import (
                                    BlueDoveError,
                                    Conflict,
                                    Forbidden,
                                    InvalidAck,
                                    InvalidJson,
                                    InvalidMessage,
                                    InvalidParameter,
                                    InvalidRequest,
                                    InvalidSubscription,
                                    LimitExceeded,
                                    NotFound,
                                    PayloadTooLarge,
                                    RateLimited,
                                    Unauthorized,
                                    Unavailable,
)
from bluedove.client.objects import Delivery, Queue, Subscription

__all__ = [
    "AsyncClient", "BlueDoveError", "Client", "Conflict", "Delivery", "Forbidden", "InvalidAck", "InvalidJson",
    "InvalidMessage", "InvalidParameter", "InvalidRequest", "InvalidSubscription", "LimitExceeded", "NotFound",
    "PayloadTooLarge", "Queue", "RateLimited", "Subscription", "Unauthorized", "Unavailable",
]
