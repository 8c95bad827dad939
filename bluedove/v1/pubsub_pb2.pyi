from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class CreateSpaceRequest(_message.Message):
    __slots__ = ("definition_json",)
    DEFINITION_JSON_FIELD_NUMBER: _ClassVar[int]
    definition_json: str
    def __init__(self, definition_json: _Optional[str] = ...) -> None: ...

class ListSpacesRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class SpaceRef(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class SpaceInfo(_message.Message):
    __slots__ = ("name", "state", "epoch", "schema", "info_json", "made")
    NAME_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_FIELD_NUMBER: _ClassVar[int]
    INFO_JSON_FIELD_NUMBER: _ClassVar[int]
    MADE_FIELD_NUMBER: _ClassVar[int]
    name: str
    state: str
    epoch: int
    schema: Space
    info_json: str
    made: bool
    def __init__(self, name: _Optional[str] = ..., state: _Optional[str] = ..., epoch: _Optional[int] = ..., schema: _Optional[_Union[Space, _Mapping]] = ..., info_json: _Optional[str] = ..., made: _Optional[bool] = ...) -> None: ...

class ListSpacesReply(_message.Message):
    __slots__ = ("spaces",)
    SPACES_FIELD_NUMBER: _ClassVar[int]
    spaces: _containers.RepeatedCompositeFieldContainer[SpaceInfo]
    def __init__(self, spaces: _Optional[_Iterable[_Union[SpaceInfo, _Mapping]]] = ...) -> None: ...

class Empty(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetSpaceRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class Dimension(_message.Message):
    __slots__ = ("name", "min", "max")
    NAME_FIELD_NUMBER: _ClassVar[int]
    MIN_FIELD_NUMBER: _ClassVar[int]
    MAX_FIELD_NUMBER: _ClassVar[int]
    name: str
    min: float
    max: float
    def __init__(self, name: _Optional[str] = ..., min: _Optional[float] = ..., max: _Optional[float] = ...) -> None: ...

class Attribute(_message.Message):
    __slots__ = ("name", "type", "optional", "min", "max")
    NAME_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    OPTIONAL_FIELD_NUMBER: _ClassVar[int]
    MIN_FIELD_NUMBER: _ClassVar[int]
    MAX_FIELD_NUMBER: _ClassVar[int]
    name: str
    type: str
    optional: bool
    min: float
    max: float
    def __init__(self, name: _Optional[str] = ..., type: _Optional[str] = ..., optional: _Optional[bool] = ..., min: _Optional[float] = ..., max: _Optional[float] = ...) -> None: ...

class Space(_message.Message):
    __slots__ = ("dimensions", "attributes", "partition")
    DIMENSIONS_FIELD_NUMBER: _ClassVar[int]
    ATTRIBUTES_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    dimensions: _containers.RepeatedCompositeFieldContainer[Dimension]
    attributes: _containers.RepeatedCompositeFieldContainer[Attribute]
    partition: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, dimensions: _Optional[_Iterable[_Union[Dimension, _Mapping]]] = ..., attributes: _Optional[_Iterable[_Union[Attribute, _Mapping]]] = ..., partition: _Optional[_Iterable[str]] = ...) -> None: ...

class CreateQueueRequest(_message.Message):
    __slots__ = ("retain_acked_s",)
    RETAIN_ACKED_S_FIELD_NUMBER: _ClassVar[int]
    retain_acked_s: int
    def __init__(self, retain_acked_s: _Optional[int] = ...) -> None: ...

class CreateQueueReply(_message.Message):
    __slots__ = ("queue", "token")
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    queue: str
    token: str
    def __init__(self, queue: _Optional[str] = ..., token: _Optional[str] = ...) -> None: ...

class DeleteQueueRequest(_message.Message):
    __slots__ = ("queue",)
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    queue: str
    def __init__(self, queue: _Optional[str] = ...) -> None: ...

class Range(_message.Message):
    __slots__ = ("low", "high")
    LOW_FIELD_NUMBER: _ClassVar[int]
    HIGH_FIELD_NUMBER: _ClassVar[int]
    low: float
    high: float
    def __init__(self, low: _Optional[float] = ..., high: _Optional[float] = ...) -> None: ...

class SubscribeRequest(_message.Message):
    __slots__ = ("queue", "predicates", "filter_json", "replay_from", "replay_from_ms")
    class PredicatesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: Range
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[Range, _Mapping]] = ...) -> None: ...
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    PREDICATES_FIELD_NUMBER: _ClassVar[int]
    FILTER_JSON_FIELD_NUMBER: _ClassVar[int]
    REPLAY_FROM_FIELD_NUMBER: _ClassVar[int]
    REPLAY_FROM_MS_FIELD_NUMBER: _ClassVar[int]
    queue: str
    predicates: _containers.MessageMap[str, Range]
    filter_json: str
    replay_from: str
    replay_from_ms: int
    def __init__(self, queue: _Optional[str] = ..., predicates: _Optional[_Mapping[str, Range]] = ..., filter_json: _Optional[str] = ..., replay_from: _Optional[str] = ..., replay_from_ms: _Optional[int] = ...) -> None: ...

class SubscribeReply(_message.Message):
    __slots__ = ("id", "queue", "token", "replay")
    ID_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    REPLAY_FIELD_NUMBER: _ClassVar[int]
    id: str
    queue: str
    token: str
    replay: Replay
    def __init__(self, id: _Optional[str] = ..., queue: _Optional[str] = ..., token: _Optional[str] = ..., replay: _Optional[_Union[Replay, _Mapping]] = ...) -> None: ...

class Replay(_message.Message):
    __slots__ = ("position", "done", "delivered")
    FROM_FIELD_NUMBER: _ClassVar[int]
    POSITION_FIELD_NUMBER: _ClassVar[int]
    DONE_FIELD_NUMBER: _ClassVar[int]
    DELIVERED_FIELD_NUMBER: _ClassVar[int]
    position: str
    done: bool
    delivered: int
    def __init__(self, position: _Optional[str] = ..., done: _Optional[bool] = ..., delivered: _Optional[int] = ..., **kwargs) -> None: ...

class SubscriptionRef(_message.Message):
    __slots__ = ("id",)
    ID_FIELD_NUMBER: _ClassVar[int]
    id: str
    def __init__(self, id: _Optional[str] = ...) -> None: ...

class UpdateSubscriptionRequest(_message.Message):
    __slots__ = ("id", "predicates", "filter_json")
    class PredicatesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: Range
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[Range, _Mapping]] = ...) -> None: ...
    ID_FIELD_NUMBER: _ClassVar[int]
    PREDICATES_FIELD_NUMBER: _ClassVar[int]
    FILTER_JSON_FIELD_NUMBER: _ClassVar[int]
    id: str
    predicates: _containers.MessageMap[str, Range]
    filter_json: str
    def __init__(self, id: _Optional[str] = ..., predicates: _Optional[_Mapping[str, Range]] = ..., filter_json: _Optional[str] = ...) -> None: ...

class SubscriptionInfo(_message.Message):
    __slots__ = ("id", "queue", "predicates", "filter_json", "replay")
    class PredicatesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: Range
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[Range, _Mapping]] = ...) -> None: ...
    ID_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    PREDICATES_FIELD_NUMBER: _ClassVar[int]
    FILTER_JSON_FIELD_NUMBER: _ClassVar[int]
    REPLAY_FIELD_NUMBER: _ClassVar[int]
    id: str
    queue: str
    predicates: _containers.MessageMap[str, Range]
    filter_json: str
    replay: Replay
    def __init__(self, id: _Optional[str] = ..., queue: _Optional[str] = ..., predicates: _Optional[_Mapping[str, Range]] = ..., filter_json: _Optional[str] = ..., replay: _Optional[_Union[Replay, _Mapping]] = ...) -> None: ...

class Value(_message.Message):
    __slots__ = ("number", "text", "flag")
    NUMBER_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    FLAG_FIELD_NUMBER: _ClassVar[int]
    number: float
    text: str
    flag: bool
    def __init__(self, number: _Optional[float] = ..., text: _Optional[str] = ..., flag: _Optional[bool] = ...) -> None: ...

class Message(_message.Message):
    __slots__ = ("attributes", "payload", "id", "values")
    class AttributesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    class ValuesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: Value
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[Value, _Mapping]] = ...) -> None: ...
    ATTRIBUTES_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    VALUES_FIELD_NUMBER: _ClassVar[int]
    attributes: _containers.ScalarMap[str, float]
    payload: str
    id: str
    values: _containers.MessageMap[str, Value]
    def __init__(self, attributes: _Optional[_Mapping[str, float]] = ..., payload: _Optional[str] = ..., id: _Optional[str] = ..., values: _Optional[_Mapping[str, Value]] = ...) -> None: ...

class PublishStreamRequest(_message.Message):
    __slots__ = ("attributes", "payload", "id", "messages", "values")
    class AttributesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    class ValuesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: Value
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[Value, _Mapping]] = ...) -> None: ...
    ATTRIBUTES_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    VALUES_FIELD_NUMBER: _ClassVar[int]
    attributes: _containers.ScalarMap[str, float]
    payload: str
    id: str
    messages: _containers.RepeatedCompositeFieldContainer[Message]
    values: _containers.MessageMap[str, Value]
    def __init__(self, attributes: _Optional[_Mapping[str, float]] = ..., payload: _Optional[str] = ..., id: _Optional[str] = ..., messages: _Optional[_Iterable[_Union[Message, _Mapping]]] = ..., values: _Optional[_Mapping[str, Value]] = ...) -> None: ...

class PublishReply(_message.Message):
    __slots__ = ("id",)
    ID_FIELD_NUMBER: _ClassVar[int]
    id: str
    def __init__(self, id: _Optional[str] = ...) -> None: ...

class PublishBatchRequest(_message.Message):
    __slots__ = ("messages",)
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[Message]
    def __init__(self, messages: _Optional[_Iterable[_Union[Message, _Mapping]]] = ...) -> None: ...

class PublishBatchReply(_message.Message):
    __slots__ = ("ids",)
    IDS_FIELD_NUMBER: _ClassVar[int]
    ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, ids: _Optional[_Iterable[str]] = ...) -> None: ...

class PollRequest(_message.Message):
    __slots__ = ("queue", "max", "wait")
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    MAX_FIELD_NUMBER: _ClassVar[int]
    WAIT_FIELD_NUMBER: _ClassVar[int]
    queue: str
    max: int
    wait: float
    def __init__(self, queue: _Optional[str] = ..., max: _Optional[int] = ..., wait: _Optional[float] = ...) -> None: ...

class Delivery(_message.Message):
    __slots__ = ("id", "attributes", "payload", "subscriptions", "receipt", "published_at", "values", "space", "replayed")
    class AttributesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    class ValuesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: Value
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[Value, _Mapping]] = ...) -> None: ...
    ID_FIELD_NUMBER: _ClassVar[int]
    ATTRIBUTES_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIPTIONS_FIELD_NUMBER: _ClassVar[int]
    RECEIPT_FIELD_NUMBER: _ClassVar[int]
    PUBLISHED_AT_FIELD_NUMBER: _ClassVar[int]
    VALUES_FIELD_NUMBER: _ClassVar[int]
    SPACE_FIELD_NUMBER: _ClassVar[int]
    REPLAYED_FIELD_NUMBER: _ClassVar[int]
    id: str
    attributes: _containers.ScalarMap[str, float]
    payload: str
    subscriptions: _containers.RepeatedScalarFieldContainer[str]
    receipt: str
    published_at: str
    values: _containers.MessageMap[str, Value]
    space: str
    replayed: bool
    def __init__(self, id: _Optional[str] = ..., attributes: _Optional[_Mapping[str, float]] = ..., payload: _Optional[str] = ..., subscriptions: _Optional[_Iterable[str]] = ..., receipt: _Optional[str] = ..., published_at: _Optional[str] = ..., values: _Optional[_Mapping[str, Value]] = ..., space: _Optional[str] = ..., replayed: _Optional[bool] = ...) -> None: ...

class PollReply(_message.Message):
    __slots__ = ("messages",)
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[Delivery]
    def __init__(self, messages: _Optional[_Iterable[_Union[Delivery, _Mapping]]] = ...) -> None: ...

class AckRequest(_message.Message):
    __slots__ = ("queue", "receipts")
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    RECEIPTS_FIELD_NUMBER: _ClassVar[int]
    queue: str
    receipts: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, queue: _Optional[str] = ..., receipts: _Optional[_Iterable[str]] = ...) -> None: ...

class SeekRequest(_message.Message):
    __slots__ = ("queue", "time", "time_ms", "receipt")
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    TIME_MS_FIELD_NUMBER: _ClassVar[int]
    RECEIPT_FIELD_NUMBER: _ClassVar[int]
    queue: str
    time: str
    time_ms: int
    receipt: str
    def __init__(self, queue: _Optional[str] = ..., time: _Optional[str] = ..., time_ms: _Optional[int] = ..., receipt: _Optional[str] = ...) -> None: ...

class SeekReply(_message.Message):
    __slots__ = ("redeliverable",)
    REDELIVERABLE_FIELD_NUMBER: _ClassVar[int]
    redeliverable: int
    def __init__(self, redeliverable: _Optional[int] = ...) -> None: ...

class ListenRequest(_message.Message):
    __slots__ = ("queue", "max")
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    MAX_FIELD_NUMBER: _ClassVar[int]
    queue: str
    max: int
    def __init__(self, queue: _Optional[str] = ..., max: _Optional[int] = ...) -> None: ...

class SubscribeBatchRequest(_message.Message):
    __slots__ = ("subscriptions",)
    SUBSCRIPTIONS_FIELD_NUMBER: _ClassVar[int]
    subscriptions: _containers.RepeatedCompositeFieldContainer[SubscribeRequest]
    def __init__(self, subscriptions: _Optional[_Iterable[_Union[SubscribeRequest, _Mapping]]] = ...) -> None: ...

class SubscribeBatchReply(_message.Message):
    __slots__ = ("subscriptions",)
    SUBSCRIPTIONS_FIELD_NUMBER: _ClassVar[int]
    subscriptions: _containers.RepeatedCompositeFieldContainer[SubscribeReply]
    def __init__(self, subscriptions: _Optional[_Iterable[_Union[SubscribeReply, _Mapping]]] = ...) -> None: ...
