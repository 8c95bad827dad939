from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ForwardMessage(_message.Message):
    __slots__ = ("id", "point", "body", "client_id")
    ID_FIELD_NUMBER: _ClassVar[int]
    POINT_FIELD_NUMBER: _ClassVar[int]
    BODY_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    id: str
    point: _containers.RepeatedScalarFieldContainer[float]
    body: bytes
    client_id: bool
    def __init__(self, id: _Optional[str] = ..., point: _Optional[_Iterable[float]] = ..., body: _Optional[bytes] = ..., client_id: _Optional[bool] = ...) -> None: ...

class ForwardRequest(_message.Message):
    __slots__ = ("dimension", "messages", "epoch", "parts", "packed", "space")
    DIMENSION_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    PARTS_FIELD_NUMBER: _ClassVar[int]
    PACKED_FIELD_NUMBER: _ClassVar[int]
    SPACE_FIELD_NUMBER: _ClassVar[int]
    dimension: int
    messages: _containers.RepeatedCompositeFieldContainer[ForwardMessage]
    epoch: int
    parts: _containers.RepeatedCompositeFieldContainer[ForwardPart]
    packed: _containers.RepeatedCompositeFieldContainer[PackedPart]
    space: str
    def __init__(self, dimension: _Optional[int] = ..., messages: _Optional[_Iterable[_Union[ForwardMessage, _Mapping]]] = ..., epoch: _Optional[int] = ..., parts: _Optional[_Iterable[_Union[ForwardPart, _Mapping]]] = ..., packed: _Optional[_Iterable[_Union[PackedPart, _Mapping]]] = ..., space: _Optional[str] = ...) -> None: ...

class PackedPart(_message.Message):
    __slots__ = ("dimension", "count", "points", "ids", "id_ends", "bodies", "body_ends", "client_ids")
    DIMENSION_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    POINTS_FIELD_NUMBER: _ClassVar[int]
    IDS_FIELD_NUMBER: _ClassVar[int]
    ID_ENDS_FIELD_NUMBER: _ClassVar[int]
    BODIES_FIELD_NUMBER: _ClassVar[int]
    BODY_ENDS_FIELD_NUMBER: _ClassVar[int]
    CLIENT_IDS_FIELD_NUMBER: _ClassVar[int]
    dimension: int
    count: int
    points: bytes
    ids: bytes
    id_ends: bytes
    bodies: bytes
    body_ends: bytes
    client_ids: bytes
    def __init__(self, dimension: _Optional[int] = ..., count: _Optional[int] = ..., points: _Optional[bytes] = ..., ids: _Optional[bytes] = ..., id_ends: _Optional[bytes] = ..., bodies: _Optional[bytes] = ..., body_ends: _Optional[bytes] = ..., client_ids: _Optional[bytes] = ...) -> None: ...

class ForwardPart(_message.Message):
    __slots__ = ("dimension", "messages")
    DIMENSION_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    dimension: int
    messages: _containers.RepeatedCompositeFieldContainer[ForwardMessage]
    def __init__(self, dimension: _Optional[int] = ..., messages: _Optional[_Iterable[_Union[ForwardMessage, _Mapping]]] = ...) -> None: ...

class ForwardReply(_message.Message):
    __slots__ = ("matched", "delivered", "fresh")
    MATCHED_FIELD_NUMBER: _ClassVar[int]
    DELIVERED_FIELD_NUMBER: _ClassVar[int]
    FRESH_FIELD_NUMBER: _ClassVar[int]
    matched: int
    delivered: int
    fresh: int
    def __init__(self, matched: _Optional[int] = ..., delivered: _Optional[int] = ..., fresh: _Optional[int] = ...) -> None: ...

class ForwardCall(_message.Message):
    __slots__ = ("seq", "request")
    SEQ_FIELD_NUMBER: _ClassVar[int]
    REQUEST_FIELD_NUMBER: _ClassVar[int]
    seq: int
    request: ForwardRequest
    def __init__(self, seq: _Optional[int] = ..., request: _Optional[_Union[ForwardRequest, _Mapping]] = ...) -> None: ...

class ForwardAnswer(_message.Message):
    __slots__ = ("seq", "reply", "code", "details")
    SEQ_FIELD_NUMBER: _ClassVar[int]
    REPLY_FIELD_NUMBER: _ClassVar[int]
    CODE_FIELD_NUMBER: _ClassVar[int]
    DETAILS_FIELD_NUMBER: _ClassVar[int]
    seq: int
    reply: ForwardReply
    code: int
    details: str
    def __init__(self, seq: _Optional[int] = ..., reply: _Optional[_Union[ForwardReply, _Mapping]] = ..., code: _Optional[int] = ..., details: _Optional[str] = ...) -> None: ...

class Subscription(_message.Message):
    __slots__ = ("id", "queue", "lows", "highs", "predicates", "log_id", "replay_from_ms")
    ID_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    LOWS_FIELD_NUMBER: _ClassVar[int]
    HIGHS_FIELD_NUMBER: _ClassVar[int]
    PREDICATES_FIELD_NUMBER: _ClassVar[int]
    LOG_ID_FIELD_NUMBER: _ClassVar[int]
    REPLAY_FROM_MS_FIELD_NUMBER: _ClassVar[int]
    id: str
    queue: str
    lows: _containers.RepeatedScalarFieldContainer[float]
    highs: _containers.RepeatedScalarFieldContainer[float]
    predicates: str
    log_id: str
    replay_from_ms: int
    def __init__(self, id: _Optional[str] = ..., queue: _Optional[str] = ..., lows: _Optional[_Iterable[float]] = ..., highs: _Optional[_Iterable[float]] = ..., predicates: _Optional[str] = ..., log_id: _Optional[str] = ..., replay_from_ms: _Optional[int] = ...) -> None: ...

class SubscriptionBatch(_message.Message):
    __slots__ = ("subscriptions", "log_id", "space", "boxes")
    SUBSCRIPTIONS_FIELD_NUMBER: _ClassVar[int]
    LOG_ID_FIELD_NUMBER: _ClassVar[int]
    SPACE_FIELD_NUMBER: _ClassVar[int]
    BOXES_FIELD_NUMBER: _ClassVar[int]
    subscriptions: _containers.RepeatedCompositeFieldContainer[Subscription]
    log_id: str
    space: str
    boxes: Boxes
    def __init__(self, subscriptions: _Optional[_Iterable[_Union[Subscription, _Mapping]]] = ..., log_id: _Optional[str] = ..., space: _Optional[str] = ..., boxes: _Optional[_Union[Boxes, _Mapping]] = ...) -> None: ...

class Boxes(_message.Message):
    __slots__ = ("ids", "queues", "lows", "highs")
    IDS_FIELD_NUMBER: _ClassVar[int]
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    LOWS_FIELD_NUMBER: _ClassVar[int]
    HIGHS_FIELD_NUMBER: _ClassVar[int]
    ids: _containers.RepeatedScalarFieldContainer[str]
    queues: _containers.RepeatedScalarFieldContainer[str]
    lows: bytes
    highs: bytes
    def __init__(self, ids: _Optional[_Iterable[str]] = ..., queues: _Optional[_Iterable[str]] = ..., lows: _Optional[bytes] = ..., highs: _Optional[bytes] = ...) -> None: ...

class RemoveRequest(_message.Message):
    __slots__ = ("ids", "log_id", "space")
    IDS_FIELD_NUMBER: _ClassVar[int]
    LOG_ID_FIELD_NUMBER: _ClassVar[int]
    SPACE_FIELD_NUMBER: _ClassVar[int]
    ids: _containers.RepeatedScalarFieldContainer[str]
    log_id: str
    space: str
    def __init__(self, ids: _Optional[_Iterable[str]] = ..., log_id: _Optional[str] = ..., space: _Optional[str] = ...) -> None: ...

class SubscriptionAck(_message.Message):
    __slots__ = ("changed", "epoch", "columns")
    CHANGED_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    COLUMNS_FIELD_NUMBER: _ClassVar[int]
    changed: int
    epoch: int
    columns: bool
    def __init__(self, changed: _Optional[int] = ..., epoch: _Optional[int] = ..., columns: _Optional[bool] = ...) -> None: ...

class TableRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class TableReply(_message.Message):
    __slots__ = ("table_json", "members")
    TABLE_JSON_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    table_json: str
    members: _containers.RepeatedCompositeFieldContainer[MemberInfo]
    def __init__(self, table_json: _Optional[str] = ..., members: _Optional[_Iterable[_Union[MemberInfo, _Mapping]]] = ...) -> None: ...

class MemberInfo(_message.Message):
    __slots__ = ("id", "address", "status", "generation", "subs", "role")
    ID_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    SUBS_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    id: str
    address: str
    status: str
    generation: int
    subs: _containers.RepeatedScalarFieldContainer[int]
    role: str
    def __init__(self, id: _Optional[str] = ..., address: _Optional[str] = ..., status: _Optional[str] = ..., generation: _Optional[int] = ..., subs: _Optional[_Iterable[int]] = ..., role: _Optional[str] = ...) -> None: ...

class PrepareRequest(_message.Message):
    __slots__ = ("table_json", "adopt", "sources", "space")
    TABLE_JSON_FIELD_NUMBER: _ClassVar[int]
    ADOPT_FIELD_NUMBER: _ClassVar[int]
    SOURCES_FIELD_NUMBER: _ClassVar[int]
    SPACE_FIELD_NUMBER: _ClassVar[int]
    table_json: str
    adopt: bool
    sources: _containers.RepeatedCompositeFieldContainer[Source]
    space: str
    def __init__(self, table_json: _Optional[str] = ..., adopt: _Optional[bool] = ..., sources: _Optional[_Iterable[_Union[Source, _Mapping]]] = ..., space: _Optional[str] = ...) -> None: ...

class Source(_message.Message):
    __slots__ = ("dimension", "member", "address", "low", "high")
    DIMENSION_FIELD_NUMBER: _ClassVar[int]
    MEMBER_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    LOW_FIELD_NUMBER: _ClassVar[int]
    HIGH_FIELD_NUMBER: _ClassVar[int]
    dimension: int
    member: str
    address: str
    low: float
    high: float
    def __init__(self, dimension: _Optional[int] = ..., member: _Optional[str] = ..., address: _Optional[str] = ..., low: _Optional[float] = ..., high: _Optional[float] = ...) -> None: ...

class ExportRequest(_message.Message):
    __slots__ = ("dimension", "low", "high", "space")
    DIMENSION_FIELD_NUMBER: _ClassVar[int]
    LOW_FIELD_NUMBER: _ClassVar[int]
    HIGH_FIELD_NUMBER: _ClassVar[int]
    SPACE_FIELD_NUMBER: _ClassVar[int]
    dimension: int
    low: float
    high: float
    space: str
    def __init__(self, dimension: _Optional[int] = ..., low: _Optional[float] = ..., high: _Optional[float] = ..., space: _Optional[str] = ...) -> None: ...

class ExportReply(_message.Message):
    __slots__ = ("log_pos", "ids", "queues", "lows", "highs", "count", "filters")
    LOG_POS_FIELD_NUMBER: _ClassVar[int]
    IDS_FIELD_NUMBER: _ClassVar[int]
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    LOWS_FIELD_NUMBER: _ClassVar[int]
    HIGHS_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    FILTERS_FIELD_NUMBER: _ClassVar[int]
    log_pos: str
    ids: str
    queues: str
    lows: bytes
    highs: bytes
    count: int
    filters: str
    def __init__(self, log_pos: _Optional[str] = ..., ids: _Optional[str] = ..., queues: _Optional[str] = ..., lows: _Optional[bytes] = ..., highs: _Optional[bytes] = ..., count: _Optional[int] = ..., filters: _Optional[str] = ...) -> None: ...

class LeaveRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class LeaveReply(_message.Message):
    __slots__ = ("ok", "reason", "epoch")
    OK_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    ok: bool
    reason: str
    epoch: int
    def __init__(self, ok: _Optional[bool] = ..., reason: _Optional[str] = ..., epoch: _Optional[int] = ...) -> None: ...

class ProposeRequest(_message.Message):
    __slots__ = ("table_json", "reason", "space")
    TABLE_JSON_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    SPACE_FIELD_NUMBER: _ClassVar[int]
    table_json: str
    reason: str
    space: str
    def __init__(self, table_json: _Optional[str] = ..., reason: _Optional[str] = ..., space: _Optional[str] = ...) -> None: ...

class ProposeReply(_message.Message):
    __slots__ = ("ok", "reason", "epoch")
    OK_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    ok: bool
    reason: str
    epoch: int
    def __init__(self, ok: _Optional[bool] = ..., reason: _Optional[str] = ..., epoch: _Optional[int] = ...) -> None: ...

class PrepareReply(_message.Message):
    __slots__ = ("epoch", "subs")
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    SUBS_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    subs: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, epoch: _Optional[int] = ..., subs: _Optional[_Iterable[int]] = ...) -> None: ...

class MatchReply(_message.Message):
    __slots__ = ("messages",)
    class Matches(_message.Message):
        __slots__ = ("subscription_ids",)
        SUBSCRIPTION_IDS_FIELD_NUMBER: _ClassVar[int]
        subscription_ids: _containers.RepeatedScalarFieldContainer[str]
        def __init__(self, subscription_ids: _Optional[_Iterable[str]] = ...) -> None: ...
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[MatchReply.Matches]
    def __init__(self, messages: _Optional[_Iterable[_Union[MatchReply.Matches, _Mapping]]] = ...) -> None: ...

class ReportRequest(_message.Message):
    __slots__ = ("space", "with_spaces")
    SPACE_FIELD_NUMBER: _ClassVar[int]
    WITH_SPACES_FIELD_NUMBER: _ClassVar[int]
    space: str
    with_spaces: bool
    def __init__(self, space: _Optional[str] = ..., with_spaces: _Optional[bool] = ...) -> None: ...

class DimensionLoad(_message.Message):
    __slots__ = ("lam", "mu", "q", "subs", "matched_total", "split_at", "walk_cpu_s", "service_mu")
    LAM_FIELD_NUMBER: _ClassVar[int]
    MU_FIELD_NUMBER: _ClassVar[int]
    Q_FIELD_NUMBER: _ClassVar[int]
    SUBS_FIELD_NUMBER: _ClassVar[int]
    MATCHED_TOTAL_FIELD_NUMBER: _ClassVar[int]
    SPLIT_AT_FIELD_NUMBER: _ClassVar[int]
    WALK_CPU_S_FIELD_NUMBER: _ClassVar[int]
    SERVICE_MU_FIELD_NUMBER: _ClassVar[int]
    lam: float
    mu: float
    q: int
    subs: int
    matched_total: int
    split_at: float
    walk_cpu_s: float
    service_mu: float
    def __init__(self, lam: _Optional[float] = ..., mu: _Optional[float] = ..., q: _Optional[int] = ..., subs: _Optional[int] = ..., matched_total: _Optional[int] = ..., split_at: _Optional[float] = ..., walk_cpu_s: _Optional[float] = ..., service_mu: _Optional[float] = ...) -> None: ...

class ReportReply(_message.Message):
    __slots__ = ("id", "generation", "ready", "epoch", "dims", "window_s", "gossip_bytes_sent", "gossip_messages_sent", "cpu_limit_cores", "cpu_limit_used", "cpu_throttled", "spaces")
    ID_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    READY_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    DIMS_FIELD_NUMBER: _ClassVar[int]
    WINDOW_S_FIELD_NUMBER: _ClassVar[int]
    GOSSIP_BYTES_SENT_FIELD_NUMBER: _ClassVar[int]
    GOSSIP_MESSAGES_SENT_FIELD_NUMBER: _ClassVar[int]
    CPU_LIMIT_CORES_FIELD_NUMBER: _ClassVar[int]
    CPU_LIMIT_USED_FIELD_NUMBER: _ClassVar[int]
    CPU_THROTTLED_FIELD_NUMBER: _ClassVar[int]
    SPACES_FIELD_NUMBER: _ClassVar[int]
    id: str
    generation: int
    ready: bool
    epoch: int
    dims: _containers.RepeatedCompositeFieldContainer[DimensionLoad]
    window_s: float
    gossip_bytes_sent: int
    gossip_messages_sent: int
    cpu_limit_cores: float
    cpu_limit_used: float
    cpu_throttled: float
    spaces: _containers.RepeatedCompositeFieldContainer[SpaceLoad]
    def __init__(self, id: _Optional[str] = ..., generation: _Optional[int] = ..., ready: _Optional[bool] = ..., epoch: _Optional[int] = ..., dims: _Optional[_Iterable[_Union[DimensionLoad, _Mapping]]] = ..., window_s: _Optional[float] = ..., gossip_bytes_sent: _Optional[int] = ..., gossip_messages_sent: _Optional[int] = ..., cpu_limit_cores: _Optional[float] = ..., cpu_limit_used: _Optional[float] = ..., cpu_throttled: _Optional[float] = ..., spaces: _Optional[_Iterable[_Union[SpaceLoad, _Mapping]]] = ...) -> None: ...

class SpaceLoad(_message.Message):
    __slots__ = ("name", "busy", "queued", "matchers", "fixed", "spans", "base")
    NAME_FIELD_NUMBER: _ClassVar[int]
    BUSY_FIELD_NUMBER: _ClassVar[int]
    QUEUED_FIELD_NUMBER: _ClassVar[int]
    MATCHERS_FIELD_NUMBER: _ClassVar[int]
    FIXED_FIELD_NUMBER: _ClassVar[int]
    SPANS_FIELD_NUMBER: _ClassVar[int]
    BASE_FIELD_NUMBER: _ClassVar[int]
    name: str
    busy: float
    queued: int
    matchers: int
    fixed: bool
    spans: int
    base: int
    def __init__(self, name: _Optional[str] = ..., busy: _Optional[float] = ..., queued: _Optional[int] = ..., matchers: _Optional[int] = ..., fixed: _Optional[bool] = ..., spans: _Optional[int] = ..., base: _Optional[int] = ...) -> None: ...
