from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Delivered(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class MemberEntry(_message.Message):
    __slots__ = ("id", "addr", "generation", "incarnation", "heartbeat", "status", "subs", "lam", "mu", "role")
    ID_FIELD_NUMBER: _ClassVar[int]
    ADDR_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    INCARNATION_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    SUBS_FIELD_NUMBER: _ClassVar[int]
    LAM_FIELD_NUMBER: _ClassVar[int]
    MU_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    id: str
    addr: str
    generation: int
    incarnation: int
    heartbeat: int
    status: int
    subs: _containers.RepeatedScalarFieldContainer[int]
    lam: float
    mu: float
    role: str
    def __init__(self, id: _Optional[str] = ..., addr: _Optional[str] = ..., generation: _Optional[int] = ..., incarnation: _Optional[int] = ..., heartbeat: _Optional[int] = ..., status: _Optional[int] = ..., subs: _Optional[_Iterable[int]] = ..., lam: _Optional[float] = ..., mu: _Optional[float] = ..., role: _Optional[str] = ...) -> None: ...

class Push(_message.Message):
    __slots__ = ("members", "epoch", "spaces")
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    SPACES_FIELD_NUMBER: _ClassVar[int]
    members: _containers.RepeatedCompositeFieldContainer[MemberEntry]
    epoch: int
    spaces: _containers.RepeatedCompositeFieldContainer[SpaceEpoch]
    def __init__(self, members: _Optional[_Iterable[_Union[MemberEntry, _Mapping]]] = ..., epoch: _Optional[int] = ..., spaces: _Optional[_Iterable[_Union[SpaceEpoch, _Mapping]]] = ...) -> None: ...

class SpaceEpoch(_message.Message):
    __slots__ = ("name", "epoch")
    NAME_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    name: str
    epoch: int
    def __init__(self, name: _Optional[str] = ..., epoch: _Optional[int] = ...) -> None: ...

class PushReply(_message.Message):
    __slots__ = ("members", "epoch", "table_json", "spaces")
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    TABLE_JSON_FIELD_NUMBER: _ClassVar[int]
    SPACES_FIELD_NUMBER: _ClassVar[int]
    members: _containers.RepeatedCompositeFieldContainer[MemberEntry]
    epoch: int
    table_json: str
    spaces: _containers.RepeatedCompositeFieldContainer[SpaceEpoch]
    def __init__(self, members: _Optional[_Iterable[_Union[MemberEntry, _Mapping]]] = ..., epoch: _Optional[int] = ..., table_json: _Optional[str] = ..., spaces: _Optional[_Iterable[_Union[SpaceEpoch, _Mapping]]] = ...) -> None: ...

class TableUpdate(_message.Message):
    __slots__ = ("epoch", "table_json")
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    TABLE_JSON_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    table_json: str
    def __init__(self, epoch: _Optional[int] = ..., table_json: _Optional[str] = ...) -> None: ...

class Ping(_message.Message):
    __slots__ = ("seq",)
    SEQ_FIELD_NUMBER: _ClassVar[int]
    seq: int
    def __init__(self, seq: _Optional[int] = ...) -> None: ...

class Ack(_message.Message):
    __slots__ = ("seq", "target")
    SEQ_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    seq: int
    target: str
    def __init__(self, seq: _Optional[int] = ..., target: _Optional[str] = ...) -> None: ...

class PingReq(_message.Message):
    __slots__ = ("seq", "target", "target_addr")
    SEQ_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    TARGET_ADDR_FIELD_NUMBER: _ClassVar[int]
    seq: int
    target: str
    target_addr: str
    def __init__(self, seq: _Optional[int] = ..., target: _Optional[str] = ..., target_addr: _Optional[str] = ...) -> None: ...

class Envelope(_message.Message):
    __slots__ = ("sender", "sender_addr", "push", "push_reply", "table_update", "ping", "ack", "ping_req")
    SENDER_FIELD_NUMBER: _ClassVar[int]
    SENDER_ADDR_FIELD_NUMBER: _ClassVar[int]
    PUSH_FIELD_NUMBER: _ClassVar[int]
    PUSH_REPLY_FIELD_NUMBER: _ClassVar[int]
    TABLE_UPDATE_FIELD_NUMBER: _ClassVar[int]
    PING_FIELD_NUMBER: _ClassVar[int]
    ACK_FIELD_NUMBER: _ClassVar[int]
    PING_REQ_FIELD_NUMBER: _ClassVar[int]
    sender: str
    sender_addr: str
    push: Push
    push_reply: PushReply
    table_update: TableUpdate
    ping: Ping
    ack: Ack
    ping_req: PingReq
    def __init__(self, sender: _Optional[str] = ..., sender_addr: _Optional[str] = ..., push: _Optional[_Union[Push, _Mapping]] = ..., push_reply: _Optional[_Union[PushReply, _Mapping]] = ..., table_update: _Optional[_Union[TableUpdate, _Mapping]] = ..., ping: _Optional[_Union[Ping, _Mapping]] = ..., ack: _Optional[_Union[Ack, _Mapping]] = ..., ping_req: _Optional[_Union[PingReq, _Mapping]] = ...) -> None: ...
