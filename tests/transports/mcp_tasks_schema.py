# ruff: noqa
"""Pydantic models of the MCP Tasks extension, generated from its official JSON Schema.

Source: github.com/modelcontextprotocol/ext-tasks, schema/draft/schema.json at commit
e4345978be1f602f1fc48d89051e8559dd5302a6; generated with
``datamodel-codegen --input-file-type jsonschema --output-model-type pydantic_v2.BaseModel
--target-python-version 3.11``. Regenerate, do not edit.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, Dict, Literal, Union

from pydantic import (
    AnyUrl,
    Base64Str,
    BaseModel,
    ConfigDict,
    Field,
    RootModel,
    confloat,
    conint,
)


class McpTasksExtension(RootModel[Any]):
    root: Any = Field(
        ...,
        description='JSON Schema for MCP Tasks extension protocol messages. Extension Identifier: io.modelcontextprotocol/tasks',
        title='MCP Tasks Extension',
    )


class Params(BaseModel):
    model_config = ConfigDict(
        extra='allow',
    )
    __annotations__ = {
        '__pydantic_extra__': Dict[str, Any],
    }
    taskId: str


class CancelledTask(BaseModel):
    taskId: str
    status: Literal['cancelled']
    statusMessage: str | None = None
    createdAt: str
    lastUpdatedAt: str
    ttlMs: conint(ge=-9007199254740991, le=9007199254740991) | None
    pollIntervalMs: conint(ge=-9007199254740991, le=9007199254740991) | None = None


class CompletedTask(BaseModel):
    taskId: str
    status: Literal['completed']
    statusMessage: str | None = None
    createdAt: str
    lastUpdatedAt: str
    ttlMs: conint(ge=-9007199254740991, le=9007199254740991) | None
    pollIntervalMs: conint(ge=-9007199254740991, le=9007199254740991) | None = None
    result: dict[str, Any]


class Status(StrEnum):
    working = 'working'
    input_required = 'input_required'
    completed = 'completed'
    failed = 'failed'
    cancelled = 'cancelled'


class DetailedTask1(BaseModel):
    taskId: str
    status: Literal['working']
    statusMessage: str | None = None
    createdAt: str
    lastUpdatedAt: str
    ttlMs: conint(ge=-9007199254740991, le=9007199254740991) | None
    pollIntervalMs: conint(ge=-9007199254740991, le=9007199254740991) | None = None


class DetailedTask3(BaseModel):
    taskId: str
    status: Literal['completed']
    statusMessage: str | None = None
    createdAt: str
    lastUpdatedAt: str
    ttlMs: conint(ge=-9007199254740991, le=9007199254740991) | None
    pollIntervalMs: conint(ge=-9007199254740991, le=9007199254740991) | None = None
    result: dict[str, Any]


class DetailedTask5(BaseModel):
    taskId: str
    status: Literal['cancelled']
    statusMessage: str | None = None
    createdAt: str
    lastUpdatedAt: str
    ttlMs: conint(ge=-9007199254740991, le=9007199254740991) | None
    pollIntervalMs: conint(ge=-9007199254740991, le=9007199254740991) | None = None


class GetTaskResult1(BaseModel):
    taskId: str
    status: Literal['working']
    statusMessage: str | None = None
    createdAt: str
    lastUpdatedAt: str
    ttlMs: conint(ge=-9007199254740991, le=9007199254740991) | None
    pollIntervalMs: conint(ge=-9007199254740991, le=9007199254740991) | None = None


class GetTaskResult3(BaseModel):
    taskId: str
    status: Literal['completed']
    statusMessage: str | None = None
    createdAt: str
    lastUpdatedAt: str
    ttlMs: conint(ge=-9007199254740991, le=9007199254740991) | None
    pollIntervalMs: conint(ge=-9007199254740991, le=9007199254740991) | None = None
    result: dict[str, Any]


class GetTaskResult5(BaseModel):
    taskId: str
    status: Literal['cancelled']
    statusMessage: str | None = None
    createdAt: str
    lastUpdatedAt: str
    ttlMs: conint(ge=-9007199254740991, le=9007199254740991) | None
    pollIntervalMs: conint(ge=-9007199254740991, le=9007199254740991) | None = None


class Task(BaseModel):
    taskId: str
    status: Status
    statusMessage: str | None = None
    createdAt: str
    lastUpdatedAt: str
    ttlMs: conint(ge=-9007199254740991, le=9007199254740991) | None
    pollIntervalMs: conint(ge=-9007199254740991, le=9007199254740991) | None = None


class TaskStatusNotificationParams1(BaseModel):
    taskId: str
    status: Literal['working']
    statusMessage: str | None = None
    createdAt: str
    lastUpdatedAt: str
    ttlMs: conint(ge=-9007199254740991, le=9007199254740991) | None
    pollIntervalMs: conint(ge=-9007199254740991, le=9007199254740991) | None = None


class TaskStatusNotificationParams3(BaseModel):
    taskId: str
    status: Literal['completed']
    statusMessage: str | None = None
    createdAt: str
    lastUpdatedAt: str
    ttlMs: conint(ge=-9007199254740991, le=9007199254740991) | None
    pollIntervalMs: conint(ge=-9007199254740991, le=9007199254740991) | None = None
    result: dict[str, Any]


class TaskStatusNotificationParams5(BaseModel):
    taskId: str
    status: Literal['cancelled']
    statusMessage: str | None = None
    createdAt: str
    lastUpdatedAt: str
    ttlMs: conint(ge=-9007199254740991, le=9007199254740991) | None
    pollIntervalMs: conint(ge=-9007199254740991, le=9007199254740991) | None = None


class Params21(BaseModel):
    taskId: str
    status: Literal['working']
    statusMessage: str | None = None
    createdAt: str
    lastUpdatedAt: str
    ttlMs: conint(ge=-9007199254740991, le=9007199254740991) | None
    pollIntervalMs: conint(ge=-9007199254740991, le=9007199254740991) | None = None


class Params23(BaseModel):
    taskId: str
    status: Literal['completed']
    statusMessage: str | None = None
    createdAt: str
    lastUpdatedAt: str
    ttlMs: conint(ge=-9007199254740991, le=9007199254740991) | None
    pollIntervalMs: conint(ge=-9007199254740991, le=9007199254740991) | None = None
    result: dict[str, Any]


class Params25(BaseModel):
    taskId: str
    status: Literal['cancelled']
    statusMessage: str | None = None
    createdAt: str
    lastUpdatedAt: str
    ttlMs: conint(ge=-9007199254740991, le=9007199254740991) | None
    pollIntervalMs: conint(ge=-9007199254740991, le=9007199254740991) | None = None


class TaskStatus(StrEnum):
    working = 'working'
    input_required = 'input_required'
    completed = 'completed'
    failed = 'failed'
    cancelled = 'cancelled'


class TaskSubscriptionAcknowledgedNotifications(BaseModel):
    taskIds: list[str] | None = None


class TaskSubscriptionNotifications(BaseModel):
    taskIds: list[str] | None = None


class TasksExtensionCapability(RootModel[dict[str, Any]]):
    root: dict[str, Any]


class WorkingTask(BaseModel):
    taskId: str
    status: Literal['working']
    statusMessage: str | None = None
    createdAt: str
    lastUpdatedAt: str
    ttlMs: conint(ge=-9007199254740991, le=9007199254740991) | None
    pollIntervalMs: conint(ge=-9007199254740991, le=9007199254740991) | None = None


class BooleanSchema(BaseModel):
    default: bool | None = None
    description: str | None = None
    title: str | None = None
    type: Literal['boolean']


class IncludeContext(StrEnum):
    allServers = 'allServers'
    none = 'none'
    thisServer = 'thisServer'


class ElicitRequestURLParams(BaseModel):
    message: str = Field(
        ...,
        description='The message to present to the user explaining why the interaction is needed.',
    )
    mode: Literal['url'] = Field(..., description='The elicitation mode.')
    url: AnyUrl = Field(..., description='The URL that the user should navigate to.')


class Action(StrEnum):
    accept = 'accept'
    cancel = 'cancel'
    decline = 'decline'


class ElicitResult(BaseModel):
    action: Action = Field(
        ...,
        description='The user action in response to the elicitation.\n- `"accept"`: User submitted the form/confirmed the action\n- `"decline"`: User explicitly declined the action\n- `"cancel"`: User dismissed without making an explicit choice',
    )
    content: dict[str, list[str] | str | int | bool] | None = Field(
        None,
        description='The submitted form data, only present when action is `"accept"` and mode was `"form"`.\nContains values matching the requested schema.\nOmitted for out-of-band mode responses.',
    )


class Error(BaseModel):
    code: int = Field(..., description='The error type that occurred.')
    data: Any | None = Field(
        None,
        description='Additional information about the error. The value of this member is defined by the sender (e.g. detailed error information, nested errors etc.).',
    )
    message: str = Field(
        ...,
        description='A short description of the error. The message SHOULD be limited to a concise single sentence.',
    )


class Theme(StrEnum):
    dark = 'dark'
    light = 'light'


class Icon(BaseModel):
    mimeType: str | None = Field(
        None,
        description='Optional MIME type override if the source MIME type is missing or generic.\nFor example: `"image/png"`, `"image/jpeg"`, or `"image/svg+xml"`.',
    )
    sizes: list[str] | None = Field(
        None,
        description='Optional array of strings that specify sizes at which the icon can be used.\nEach string should be in WxH format (e.g., `"48x48"`, `"96x96"`) or `"any"` for scalable formats like SVG.\n\nIf not provided, the client should assume that the icon can be used at any size.',
    )
    src: AnyUrl = Field(
        ...,
        description='A standard URI pointing to an icon resource. May be an HTTP/HTTPS URL or a\n`data:` URI with Base64-encoded image data.\n\nConsumers SHOULD take steps to ensure URLs serving icons are from the\nsame domain as the client/server or a trusted domain.\n\nConsumers SHOULD take appropriate precautions when consuming SVGs as they can contain\nexecutable JavaScript.',
    )
    theme: Theme | None = Field(
        None,
        description='Optional specifier for the theme this icon is designed for. `"light"` indicates\nthe icon is designed to be used with a light background, and `"dark"` indicates\nthe icon is designed to be used with a dark background.\n\nIf not provided, the client should assume the icon can be used with any theme.',
    )


class Implementation(BaseModel):
    description: str | None = Field(
        None,
        description='An optional human-readable description of what this implementation does.\n\nThis can be used by clients or servers to provide context about their purpose\nand capabilities. For example, a server might describe the types of resources\nor tools it provides, while a client might describe its intended use case.',
    )
    icons: list[Icon] | None = Field(
        None,
        description='Optional set of sized icons that the client can display in a user interface.\n\nClients that support rendering icons MUST support at least the following MIME types:\n- `image/png` - PNG images (safe, universal compatibility)\n- `image/jpeg` (and `image/jpg`) - JPEG images (safe, universal compatibility)\n\nClients that support rendering icons SHOULD also support:\n- `image/svg+xml` - SVG images (scalable but requires security precautions)\n- `image/webp` - WebP images (modern, efficient format)',
    )
    name: str = Field(
        ...,
        description="Intended for programmatic or logical use, but used as a display name in past specs or fallback (if title isn't present).",
    )
    title: str | None = Field(
        None,
        description='Intended for UI and end-user contexts — optimized to be human-readable and easily understood,\neven by those unfamiliar with domain-specific terminology.\n\nIf not provided, the name should be used for display (except for {@link Tool},\nwhere `annotations.title` should be given precedence over using `name`,\nif present).',
    )
    version: str = Field(..., description='The version of this implementation.')
    websiteUrl: AnyUrl | None = Field(
        None, description='An optional URL of the website for this implementation.'
    )


class JSONRPCNotification(BaseModel):
    jsonrpc: Literal['2.0']
    method: str
    params: dict[str, Any] | None = None


class LegacyTitledEnumSchema(BaseModel):
    default: str | None = None
    description: str | None = None
    enum: list[str]
    enumNames: list[str] | None = Field(
        None,
        description='(Legacy) Display names for enum values.\nNon-standard according to JSON schema 2020-12.',
    )
    title: str | None = None
    type: Literal['string']


class MetaObject(BaseModel):
    pass


class ModelHint(BaseModel):
    name: str | None = Field(
        None,
        description="A hint for a model name.\n\nThe client SHOULD treat this as a substring of a model name; for example:\n - `claude-3-5-sonnet` should match `claude-3-5-sonnet-20241022`\n - `sonnet` should match `claude-3-5-sonnet-20241022`, `claude-3-sonnet-20240229`, etc.\n - `claude` should match any Claude model\n\nThe client MAY also map the string to a different provider's model name or a different model family, as long as it fills a similar niche; for example:\n - `gemini-1.5-flash` could match `claude-3-haiku-20240307`",
    )


class ModelPreferences(BaseModel):
    costPriority: confloat(ge=0.0, le=1.0) | None = Field(
        None,
        description='How much to prioritize cost when selecting a model. A value of 0 means cost\nis not important, while a value of 1 means cost is the most important\nfactor.',
    )
    hints: list[ModelHint] | None = Field(
        None,
        description='Optional hints to use for model selection.\n\nIf multiple hints are specified, the client MUST evaluate them in order\n(such that the first match is taken).\n\nThe client SHOULD prioritize these hints over the numeric priorities, but\nMAY still use the priorities to select from ambiguous matches.',
    )
    intelligencePriority: confloat(ge=0.0, le=1.0) | None = Field(
        None,
        description='How much to prioritize intelligence and capabilities when selecting a\nmodel. A value of 0 means intelligence is not important, while a value of 1\nmeans intelligence is the most important factor.',
    )
    speedPriority: confloat(ge=0.0, le=1.0) | None = Field(
        None,
        description='How much to prioritize sampling speed (latency) when selecting a model. A\nvalue of 0 means speed is not important, while a value of 1 means speed is\nthe most important factor.',
    )


class Type(StrEnum):
    integer = 'integer'
    number = 'number'


class NumberSchema(BaseModel):
    default: float | None = None
    description: str | None = None
    maximum: float | None = None
    minimum: float | None = None
    title: str | None = None
    type: Type


class RequestId(RootModel[str | int]):
    root: str | int = Field(
        ..., description='A uniquely identifying ID for a request in JSON-RPC.'
    )


class ResultMetaObject(BaseModel):
    io_modelcontextprotocol_serverInfo: Implementation | None = Field(
        None,
        alias='io.modelcontextprotocol/serverInfo',
        description='Identifies the server software producing the response. Servers SHOULD\ninclude this field on every response unless specifically configured not\nto do so.\n\nThe {@link Implementation} schema requires `name` and `version`; other\nfields are optional.\n\nThe value is self-reported by the server and is not verified by the\nprotocol. It is intended for display, logging, and debugging. Clients\nSHOULD NOT use it to change their behavior, and SHOULD NOT rely on it for\nsecurity decisions.',
    )


class Role(StrEnum):
    assistant = 'assistant'
    user = 'user'


class Root(BaseModel):
    field_meta: MetaObject | None = Field(None, alias='_meta')
    name: str | None = Field(
        None,
        description='An optional name for the root. This can be used to provide a human-readable\nidentifier for the root, which may be useful for display purposes or for\nreferencing the root in other parts of the application.',
    )
    uri: AnyUrl = Field(
        ...,
        description='The URI identifying the root. This *must* start with `file://` for now.\nThis restriction may be relaxed in future versions of the protocol to allow\nother URI schemes.',
    )


class Format(StrEnum):
    date = 'date'
    date_time = 'date-time'
    email = 'email'
    uri = 'uri'


class StringSchema(BaseModel):
    default: str | None = None
    description: str | None = None
    format: Format | None = None
    maxLength: int | None = None
    minLength: int | None = None
    title: str | None = None
    type: Literal['string']


class TextResourceContents(BaseModel):
    field_meta: MetaObject | None = Field(None, alias='_meta')
    mimeType: str | None = Field(
        None, description='The MIME type of this resource, if known.'
    )
    text: str = Field(
        ...,
        description='The text of the item. This must only be set if the item can actually be represented as text (not binary data).',
    )
    uri: AnyUrl = Field(..., description='The URI of this resource.')


class AnyOfItem(BaseModel):
    const: str = Field(..., description='The constant enum value.')
    title: str = Field(..., description='Display title for this option.')


class Items(BaseModel):
    anyOf: list[AnyOfItem] = Field(
        ..., description='Array of enum options with values and display labels.'
    )


class TitledMultiSelectEnumSchema(BaseModel):
    default: list[str] | None = Field(None, description='Optional default value.')
    description: str | None = Field(
        None, description='Optional description for the enum field.'
    )
    items: Items = Field(
        ..., description='Schema for array items with enum options and display labels.'
    )
    maxItems: int | None = Field(None, description='Maximum number of items to select.')
    minItems: int | None = Field(None, description='Minimum number of items to select.')
    title: str | None = Field(None, description='Optional title for the enum field.')
    type: Literal['array']


class OneOfItem(BaseModel):
    const: str = Field(..., description='The enum value.')
    title: str = Field(..., description='Display label for this option.')


class TitledSingleSelectEnumSchema(BaseModel):
    default: str | None = Field(None, description='Optional default value.')
    description: str | None = Field(
        None, description='Optional description for the enum field.'
    )
    oneOf: list[OneOfItem] = Field(
        ..., description='Array of enum options with values and display labels.'
    )
    title: str | None = Field(None, description='Optional title for the enum field.')
    type: Literal['string']


class InputSchema(BaseModel):
    model_config = ConfigDict(
        extra='allow',
    )
    __annotations__ = {
        '__pydantic_extra__': Dict[str, Any],
    }
    field_schema: str | None = Field(None, alias='$schema')
    type: Literal['object']


class OutputSchema(BaseModel):
    model_config = ConfigDict(
        extra='allow',
    )
    __annotations__ = {
        '__pydantic_extra__': Dict[str, Any],
    }
    field_schema: str | None = Field(None, alias='$schema')


class ToolAnnotations(BaseModel):
    destructiveHint: bool | None = Field(
        None,
        description='If true, the tool may perform destructive updates to its environment.\nIf false, the tool performs only additive updates.\n\n(This property is meaningful only when `readOnlyHint == false`)\n\nDefault: true',
    )
    idempotentHint: bool | None = Field(
        None,
        description='If true, calling the tool repeatedly with the same arguments\nwill have no additional effect on its environment.\n\n(This property is meaningful only when `readOnlyHint == false`)\n\nDefault: false',
    )
    openWorldHint: bool | None = Field(
        None,
        description='If true, this tool may interact with an "open world" of external\nentities. If false, the tool\'s domain of interaction is closed.\nFor example, the world of a web search tool is open, whereas that\nof a memory tool is not.\n\nDefault: true',
    )
    readOnlyHint: bool | None = Field(
        None,
        description='If true, the tool does not modify its environment.\n\nDefault: false',
    )
    title: str | None = Field(None, description='A human-readable title for the tool.')


class Mode(StrEnum):
    auto = 'auto'
    none = 'none'
    required = 'required'


class ToolChoice(BaseModel):
    mode: Mode | None = Field(
        None,
        description='Controls the tool use ability of the model:\n- `"auto"`: Model decides whether to use tools (default)\n- `"required"`: Model MUST use at least one tool before completing\n- `"none"`: Model MUST NOT use any tools',
    )


class ToolUseContent(BaseModel):
    field_meta: MetaObject | None = Field(
        None,
        alias='_meta',
        description='Optional metadata about the tool use. Clients SHOULD preserve this field when\nincluding tool uses in subsequent sampling requests to enable caching optimizations.',
    )
    id: str = Field(
        ...,
        description='A unique identifier for this tool use.\n\nThis ID is used to match tool results to their corresponding tool uses.',
    )
    input: dict[str, Any] = Field(
        ...,
        description="The arguments to pass to the tool, conforming to the tool's input schema.",
    )
    name: str = Field(..., description='The name of the tool to call.')
    type: Literal['tool_use']


class Items1(BaseModel):
    enum: list[str] = Field(..., description='Array of enum values to choose from.')
    type: Literal['string']


class UntitledMultiSelectEnumSchema(BaseModel):
    default: list[str] | None = Field(None, description='Optional default value.')
    description: str | None = Field(
        None, description='Optional description for the enum field.'
    )
    items: Items1 = Field(..., description='Schema for the array items.')
    maxItems: int | None = Field(None, description='Maximum number of items to select.')
    minItems: int | None = Field(None, description='Minimum number of items to select.')
    title: str | None = Field(None, description='Optional title for the enum field.')
    type: Literal['array']


class UntitledSingleSelectEnumSchema(BaseModel):
    default: str | None = Field(None, description='Optional default value.')
    description: str | None = Field(
        None, description='Optional description for the enum field.'
    )
    enum: list[str] = Field(..., description='Array of enum values to choose from.')
    title: str | None = Field(None, description='Optional title for the enum field.')
    type: Literal['string']


class DetailedTask4(BaseModel):
    taskId: str
    status: Literal['failed']
    statusMessage: str | None = None
    createdAt: str
    lastUpdatedAt: str
    ttlMs: conint(ge=-9007199254740991, le=9007199254740991) | None
    pollIntervalMs: conint(ge=-9007199254740991, le=9007199254740991) | None = None
    error: Error


class FailedTask(BaseModel):
    taskId: str
    status: Literal['failed']
    statusMessage: str | None = None
    createdAt: str
    lastUpdatedAt: str
    ttlMs: conint(ge=-9007199254740991, le=9007199254740991) | None
    pollIntervalMs: conint(ge=-9007199254740991, le=9007199254740991) | None = None
    error: Error


class GetTaskResult4(BaseModel):
    taskId: str
    status: Literal['failed']
    statusMessage: str | None = None
    createdAt: str
    lastUpdatedAt: str
    ttlMs: conint(ge=-9007199254740991, le=9007199254740991) | None
    pollIntervalMs: conint(ge=-9007199254740991, le=9007199254740991) | None = None
    error: Error


class TaskStatusNotificationParams4(BaseModel):
    taskId: str
    status: Literal['failed']
    statusMessage: str | None = None
    createdAt: str
    lastUpdatedAt: str
    ttlMs: conint(ge=-9007199254740991, le=9007199254740991) | None
    pollIntervalMs: conint(ge=-9007199254740991, le=9007199254740991) | None = None
    error: Error


class Params24(BaseModel):
    taskId: str
    status: Literal['failed']
    statusMessage: str | None = None
    createdAt: str
    lastUpdatedAt: str
    ttlMs: conint(ge=-9007199254740991, le=9007199254740991) | None
    pollIntervalMs: conint(ge=-9007199254740991, le=9007199254740991) | None = None
    error: Error


class Annotations(BaseModel):
    audience: list[Role] | None = Field(
        None,
        description='Describes who the intended audience of this object or data is.\n\nIt can include multiple entries to indicate content useful for multiple audiences (e.g., `["user", "assistant"]`).',
    )
    lastModified: str | None = Field(
        None,
        description='The moment the resource was last modified, as an ISO 8601 formatted string.\n\nShould be an ISO 8601 formatted string (e.g., "2025-01-12T15:00:58Z").\n\nExamples: last activity timestamp in an open file, timestamp when the resource\nwas attached, etc.',
    )
    priority: confloat(ge=0.0, le=1.0) | None = Field(
        None,
        description='Describes how important this data is for operating the server.\n\nA value of 1 means "most important," and indicates that the data is\neffectively required, while 0 means "least important," and indicates that\nthe data is entirely optional.',
    )


class AudioContent(BaseModel):
    field_meta: MetaObject | None = Field(None, alias='_meta')
    annotations: Annotations | None = Field(
        None, description='Optional annotations for the client.'
    )
    data: Base64Str = Field(..., description='The base64-encoded audio data.')
    mimeType: str = Field(
        ...,
        description='The MIME type of the audio. Different providers may support different audio types.',
    )
    type: Literal['audio']


class BlobResourceContents(BaseModel):
    field_meta: MetaObject | None = Field(None, alias='_meta')
    blob: Base64Str = Field(
        ...,
        description='A base64-encoded string representing the binary data of the item.',
    )
    mimeType: str | None = Field(
        None, description='The MIME type of this resource, if known.'
    )
    uri: AnyUrl = Field(..., description='The URI of this resource.')


class EmbeddedResource(BaseModel):
    field_meta: MetaObject | None = Field(None, alias='_meta')
    annotations: Annotations | None = Field(
        None, description='Optional annotations for the client.'
    )
    resource: TextResourceContents | BlobResourceContents
    type: Literal['resource']


class ImageContent(BaseModel):
    field_meta: MetaObject | None = Field(None, alias='_meta')
    annotations: Annotations | None = Field(
        None, description='Optional annotations for the client.'
    )
    data: Base64Str = Field(..., description='The base64-encoded image data.')
    mimeType: str = Field(
        ...,
        description='The MIME type of the image. Different providers may support different image types.',
    )
    type: Literal['image']


class JSONRPCRequest(BaseModel):
    id: RequestId
    jsonrpc: Literal['2.0']
    method: str
    params: dict[str, Any] | None = None


class Params4(BaseModel):
    field_meta: MetaObject | None = Field(None, alias='_meta')


class ListRootsRequest(BaseModel):
    method: Literal['roots/list']
    params: Params4 | None = None


class ListRootsResult(BaseModel):
    roots: list[Root]


class NotificationMetaObject(BaseModel):
    io_modelcontextprotocol_subscriptionId: RequestId | None = Field(
        None,
        alias='io.modelcontextprotocol/subscriptionId',
        description='Identifies the subscription stream a notification was delivered on. The\nserver MUST include this key on every notification delivered via a\n{@link SubscriptionsListenRequestsubscriptions/listen} stream, so the\nclient can correlate the notification with the originating subscription.\nThe key is absent on notifications not delivered via a subscription\nstream (e.g. progress notifications for an in-flight request), which is\nwhy it is optional here.\n\nThe value is the JSON-RPC ID of the `subscriptions/listen` request that\nopened the stream.',
    )


class NotificationParams(BaseModel):
    field_meta: NotificationMetaObject | None = Field(None, alias='_meta')


class PrimitiveSchemaDefinition(
    RootModel[
        StringSchema
        | NumberSchema
        | BooleanSchema
        | UntitledSingleSelectEnumSchema
        | TitledSingleSelectEnumSchema
        | UntitledMultiSelectEnumSchema
        | TitledMultiSelectEnumSchema
        | LegacyTitledEnumSchema
    ]
):
    root: (
        StringSchema
        | NumberSchema
        | BooleanSchema
        | UntitledSingleSelectEnumSchema
        | TitledSingleSelectEnumSchema
        | UntitledMultiSelectEnumSchema
        | TitledMultiSelectEnumSchema
        | LegacyTitledEnumSchema
    ) = Field(
        ...,
        description='Restricted schema definitions that only allow primitive types\nwithout nested objects or arrays.',
    )


class ResourceLink(BaseModel):
    field_meta: MetaObject | None = Field(None, alias='_meta')
    annotations: Annotations | None = Field(
        None, description='Optional annotations for the client.'
    )
    description: str | None = Field(
        None,
        description='A description of what this resource represents.\n\nThis can be used by clients to improve the LLM\'s understanding of available resources. It can be thought of like a "hint" to the model.',
    )
    icons: list[Icon] | None = Field(
        None,
        description='Optional set of sized icons that the client can display in a user interface.\n\nClients that support rendering icons MUST support at least the following MIME types:\n- `image/png` - PNG images (safe, universal compatibility)\n- `image/jpeg` (and `image/jpg`) - JPEG images (safe, universal compatibility)\n\nClients that support rendering icons SHOULD also support:\n- `image/svg+xml` - SVG images (scalable but requires security precautions)\n- `image/webp` - WebP images (modern, efficient format)',
    )
    mimeType: str | None = Field(
        None, description='The MIME type of this resource, if known.'
    )
    name: str = Field(
        ...,
        description="Intended for programmatic or logical use, but used as a display name in past specs or fallback (if title isn't present).",
    )
    size: int | None = Field(
        None,
        description='The size of the raw resource content, in bytes (i.e., before base64 encoding or any tokenization), if known.\n\nThis can be used by Hosts to display file sizes and estimate context window usage.',
    )
    title: str | None = Field(
        None,
        description='Intended for UI and end-user contexts — optimized to be human-readable and easily understood,\neven by those unfamiliar with domain-specific terminology.\n\nIf not provided, the name should be used for display (except for {@link Tool},\nwhere `annotations.title` should be given precedence over using `name`,\nif present).',
    )
    type: Literal['resource_link']
    uri: AnyUrl = Field(..., description='The URI of this resource.')


class Result(BaseModel):
    model_config = ConfigDict(
        extra='allow',
    )
    __annotations__ = {
        '__pydantic_extra__': Dict[str, Any],
    }
    field_meta: ResultMetaObject | None = Field(None, alias='_meta')
    resultType: str = Field(
        ...,
        description='Indicates the type of the result, which allows the client to determine\nhow to parse the result object.\n\nServers implementing this protocol version MUST include this field.\nFor backward compatibility, when a client receives a result from a\nserver implementing an earlier protocol version (which does not include\n`resultType`), the client MUST treat the absent field as `"complete"`.',
    )


class TextContent(BaseModel):
    field_meta: MetaObject | None = Field(None, alias='_meta')
    annotations: Annotations | None = Field(
        None, description='Optional annotations for the client.'
    )
    text: str = Field(..., description='The text content of the message.')
    type: Literal['text']


class Tool(BaseModel):
    field_meta: MetaObject | None = Field(None, alias='_meta')
    annotations: ToolAnnotations | None = Field(
        None,
        description='Optional additional tool information.\n\nDisplay name precedence order is: `title`, `annotations.title`, then `name`.',
    )
    description: str | None = Field(
        None,
        description='A human-readable description of the tool.\n\nThis can be used by clients to improve the LLM\'s understanding of available tools. It can be thought of like a "hint" to the model.',
    )
    icons: list[Icon] | None = Field(
        None,
        description='Optional set of sized icons that the client can display in a user interface.\n\nClients that support rendering icons MUST support at least the following MIME types:\n- `image/png` - PNG images (safe, universal compatibility)\n- `image/jpeg` (and `image/jpg`) - JPEG images (safe, universal compatibility)\n\nClients that support rendering icons SHOULD also support:\n- `image/svg+xml` - SVG images (scalable but requires security precautions)\n- `image/webp` - WebP images (modern, efficient format)',
    )
    inputSchema: InputSchema = Field(
        ...,
        description='A JSON Schema object defining the expected parameters for the tool.\n\nTool arguments are always JSON objects, so `type: "object"` is required at the root.\nBeyond that, any JSON Schema 2020-12 keyword may appear alongside `type` — including\ncomposition keywords (`oneOf`, `anyOf`, `allOf`, `not`), conditional keywords\n(`if`/`then`/`else`), reference keywords (`$ref`, `$defs`, `$anchor`), and any other\nstandard validation or annotation keywords.\n\nProperty schemas may carry an `x-mcp-header` annotation to mirror the\nargument value into an HTTP header on the Streamable HTTP transport. See\nthe Streamable HTTP transport specification for the validity and\nextraction rules.\n\nDefaults to JSON Schema 2020-12 when no explicit `$schema` is provided.',
    )
    name: str = Field(
        ...,
        description="Intended for programmatic or logical use, but used as a display name in past specs or fallback (if title isn't present).",
    )
    outputSchema: OutputSchema | None = Field(
        None,
        description="An optional JSON Schema object defining the structure of the tool's output returned in\nthe structuredContent field of a {@link CallToolResult}. This can be any valid JSON Schema 2020-12.\n\nDefaults to JSON Schema 2020-12 when no explicit `$schema` is provided.",
    )
    title: str | None = Field(
        None,
        description='Intended for UI and end-user contexts — optimized to be human-readable and easily understood,\neven by those unfamiliar with domain-specific terminology.\n\nIf not provided, the name should be used for display (except for {@link Tool},\nwhere `annotations.title` should be given precedence over using `name`,\nif present).',
    )


class CancelTaskRequest(JSONRPCRequest):
    method: Literal['tasks/cancel']
    params: Params


class CancelTaskResult(Result):
    resultType: Literal['complete'] = Field(
        ...,
        description='Indicates the type of the result, which allows the client to determine\nhow to parse the result object.\n\nServers implementing this protocol version MUST include this field.\nFor backward compatibility, when a client receives a result from a\nserver implementing an earlier protocol version (which does not include\n`resultType`), the client MUST treat the absent field as `"complete"`.',
    )


class CreateTaskResult(Result):
    taskId: str
    status: Status
    statusMessage: str | None = None
    createdAt: str
    lastUpdatedAt: str
    ttlMs: conint(ge=-9007199254740991, le=9007199254740991) | None
    pollIntervalMs: conint(ge=-9007199254740991, le=9007199254740991) | None = None
    resultType: Literal['task'] = Field(
        ...,
        description='Indicates the type of the result, which allows the client to determine\nhow to parse the result object.\n\nServers implementing this protocol version MUST include this field.\nFor backward compatibility, when a client receives a result from a\nserver implementing an earlier protocol version (which does not include\n`resultType`), the client MUST treat the absent field as `"complete"`.',
    )


class GetTaskRequest(JSONRPCRequest):
    method: Literal['tasks/get']
    params: Params


class GetTaskResult6(Result):
    resultType: Literal['complete'] = Field(
        ...,
        description='Indicates the type of the result, which allows the client to determine\nhow to parse the result object.\n\nServers implementing this protocol version MUST include this field.\nFor backward compatibility, when a client receives a result from a\nserver implementing an earlier protocol version (which does not include\n`resultType`), the client MUST treat the absent field as `"complete"`.',
    )


class GetTaskResult7(GetTaskResult1, GetTaskResult6):
    pass


class GetTaskResult9(GetTaskResult3, GetTaskResult6):
    pass


class GetTaskResult10(GetTaskResult4, GetTaskResult6):
    pass


class GetTaskResult11(GetTaskResult5, GetTaskResult6):
    pass


class TaskStatusNotificationParams6(NotificationParams):
    pass


class TaskStatusNotificationParams7(
    TaskStatusNotificationParams1, TaskStatusNotificationParams6
):
    pass


class TaskStatusNotificationParams9(
    TaskStatusNotificationParams3, TaskStatusNotificationParams6
):
    pass


class TaskStatusNotificationParams10(
    TaskStatusNotificationParams4, TaskStatusNotificationParams6
):
    pass


class TaskStatusNotificationParams11(
    TaskStatusNotificationParams5, TaskStatusNotificationParams6
):
    pass


class Params26(NotificationParams):
    model_config = ConfigDict(
        extra='allow',
    )
    __annotations__ = {
        '__pydantic_extra__': Dict[str, Any],
    }


class Params27(Params21, Params26):
    model_config = ConfigDict(
        extra='allow',
    )
    __annotations__ = {
        '__pydantic_extra__': Dict[str, Any],
    }


class Params29(Params23, Params26):
    model_config = ConfigDict(
        extra='allow',
    )
    __annotations__ = {
        '__pydantic_extra__': Dict[str, Any],
    }


class Params210(Params24, Params26):
    model_config = ConfigDict(
        extra='allow',
    )
    __annotations__ = {
        '__pydantic_extra__': Dict[str, Any],
    }


class Params211(Params25, Params26):
    model_config = ConfigDict(
        extra='allow',
    )
    __annotations__ = {
        '__pydantic_extra__': Dict[str, Any],
    }


class UpdateTaskResult(Result):
    resultType: Literal['complete'] = Field(
        ...,
        description='Indicates the type of the result, which allows the client to determine\nhow to parse the result object.\n\nServers implementing this protocol version MUST include this field.\nFor backward compatibility, when a client receives a result from a\nserver implementing an earlier protocol version (which does not include\n`resultType`), the client MUST treat the absent field as `"complete"`.',
    )


class ContentBlock(
    RootModel[
        TextContent | ImageContent | AudioContent | ResourceLink | EmbeddedResource
    ]
):
    root: TextContent | ImageContent | AudioContent | ResourceLink | EmbeddedResource


class RequestedSchema(BaseModel):
    field_schema: str | None = Field(None, alias='$schema')
    properties: dict[str, PrimitiveSchemaDefinition]
    required: list[str] | None = None
    type: Literal['object']


class ElicitRequestFormParams(BaseModel):
    message: str = Field(
        ...,
        description='The message to present to the user describing what information is being requested.',
    )
    mode: Literal['form'] | None = Field(None, description='The elicitation mode.')
    requestedSchema: RequestedSchema = Field(
        ...,
        description='A restricted subset of JSON Schema.\nOnly top-level properties are allowed, without nesting.',
    )


class ElicitRequestParams(RootModel[ElicitRequestFormParams | ElicitRequestURLParams]):
    root: ElicitRequestFormParams | ElicitRequestURLParams = Field(
        ...,
        description='The parameters for a request to elicit additional information from the user via the client.',
    )


class ToolResultContent(BaseModel):
    field_meta: MetaObject | None = Field(
        None,
        alias='_meta',
        description='Optional metadata about the tool result. Clients SHOULD preserve this field when\nincluding tool results in subsequent sampling requests to enable caching optimizations.',
    )
    content: list[ContentBlock] = Field(
        ...,
        description='The unstructured result content of the tool use.\n\nThis has the same format as {@link CallToolResult.content} and can include text, images,\naudio, resource links, and embedded resources.',
    )
    isError: bool | None = Field(
        None,
        description='Whether the tool use resulted in an error.\n\nIf true, the content typically describes the error that occurred.\nDefault: false',
    )
    structuredContent: Any | None = Field(
        None,
        description='An optional structured result value.\n\nThis can be any JSON value (object, array, string, number, boolean, or null).\nIf the tool defined an {@link Tool.outputSchema}, this SHOULD conform to that schema.',
    )
    toolUseId: str = Field(
        ...,
        description='The ID of the tool use this result corresponds to.\n\nThis MUST match the ID from a previous {@link ToolUseContent}.',
    )
    type: Literal['tool_result']


class ElicitRequest(BaseModel):
    method: Literal['elicitation/create']
    params: ElicitRequestParams


class SamplingMessageContentBlock(
    RootModel[
        TextContent | ImageContent | AudioContent | ToolUseContent | ToolResultContent
    ]
):
    root: TextContent | ImageContent | AudioContent | ToolUseContent | ToolResultContent


class CreateMessageResult(BaseModel):
    field_meta: MetaObject | None = Field(None, alias='_meta')
    content: (
        TextContent
        | ImageContent
        | AudioContent
        | ToolUseContent
        | ToolResultContent
        | list[SamplingMessageContentBlock]
    )
    model: str = Field(
        ..., description='The name of the model that generated the message.'
    )
    role: Role
    stopReason: str | None = Field(
        None,
        description='The reason why sampling stopped, if known.\n\nStandard values:\n- `"endTurn"`: Natural end of the assistant\'s turn\n- `"stopSequence"`: A stop sequence was encountered\n- `"maxTokens"`: Maximum token limit was reached\n- `"toolUse"`: The model wants to use one or more tools\n\nThis field is an open string to allow for provider-specific stop reasons.',
    )


class InputResponse(RootModel[CreateMessageResult | ListRootsResult | ElicitResult]):
    root: CreateMessageResult | ListRootsResult | ElicitResult


class InputResponses(RootModel[dict[str, InputResponse]]):
    root: dict[str, InputResponse]


class SamplingMessage(BaseModel):
    field_meta: MetaObject | None = Field(None, alias='_meta')
    content: (
        TextContent
        | ImageContent
        | AudioContent
        | ToolUseContent
        | ToolResultContent
        | list[SamplingMessageContentBlock]
    )
    role: Role


class Params3(BaseModel):
    model_config = ConfigDict(
        extra='allow',
    )
    __annotations__ = {
        '__pydantic_extra__': Dict[str, Any],
    }
    taskId: str
    inputResponses: InputResponses


class UpdateTaskRequest(JSONRPCRequest):
    method: Literal['tasks/update']
    params: Params3


class DetailedTask2(BaseModel):
    taskId: str
    status: Literal['input_required']
    statusMessage: str | None = None
    createdAt: str
    lastUpdatedAt: str
    ttlMs: conint(ge=-9007199254740991, le=9007199254740991) | None
    pollIntervalMs: conint(ge=-9007199254740991, le=9007199254740991) | None = None
    inputRequests: InputRequests


class GetTaskResult2(BaseModel):
    taskId: str
    status: Literal['input_required']
    statusMessage: str | None = None
    createdAt: str
    lastUpdatedAt: str
    ttlMs: conint(ge=-9007199254740991, le=9007199254740991) | None
    pollIntervalMs: conint(ge=-9007199254740991, le=9007199254740991) | None = None
    inputRequests: InputRequests


class InputRequiredTask(BaseModel):
    taskId: str
    status: Literal['input_required']
    statusMessage: str | None = None
    createdAt: str
    lastUpdatedAt: str
    ttlMs: conint(ge=-9007199254740991, le=9007199254740991) | None
    pollIntervalMs: conint(ge=-9007199254740991, le=9007199254740991) | None = None
    inputRequests: InputRequests


class TaskStatusNotificationParams2(BaseModel):
    taskId: str
    status: Literal['input_required']
    statusMessage: str | None = None
    createdAt: str
    lastUpdatedAt: str
    ttlMs: conint(ge=-9007199254740991, le=9007199254740991) | None
    pollIntervalMs: conint(ge=-9007199254740991, le=9007199254740991) | None = None
    inputRequests: InputRequests


class Params22(BaseModel):
    taskId: str
    status: Literal['input_required']
    statusMessage: str | None = None
    createdAt: str
    lastUpdatedAt: str
    ttlMs: conint(ge=-9007199254740991, le=9007199254740991) | None
    pollIntervalMs: conint(ge=-9007199254740991, le=9007199254740991) | None = None
    inputRequests: InputRequests


class TaskStatusNotification(JSONRPCNotification):
    method: Literal['notifications/tasks']
    params: Params2


class CreateMessageRequest(BaseModel):
    method: Literal['sampling/createMessage']
    params: CreateMessageRequestParams


class CreateMessageRequestParams(BaseModel):
    includeContext: IncludeContext | None = Field(
        None,
        description='A request to include context from one or more MCP servers (including the caller), to be attached to the prompt.\nThe client MAY ignore this request.\n\nDefault is `"none"`. The values `"thisServer"` and `"allServers"` are deprecated (SEP-2596): servers SHOULD\nomit this field or use `"none"`, and SHOULD only use the deprecated values if the client declares\n{@link ClientCapabilities.sampling.context}.',
    )
    maxTokens: int = Field(
        ...,
        description='The requested maximum number of tokens to sample (to prevent runaway completions).\n\nThe client MAY choose to sample fewer tokens than the requested maximum.',
    )
    messages: list[SamplingMessage]
    metadata: JSONObject | None = Field(
        None,
        description='Optional metadata to pass through to the LLM provider. The format of this metadata is provider-specific.',
    )
    modelPreferences: ModelPreferences | None = Field(
        None,
        description="The server's preferences for which model to select. The client MAY ignore these preferences.",
    )
    stopSequences: list[str] | None = None
    systemPrompt: str | None = Field(
        None,
        description='An optional system prompt the server wants to use for sampling. The client MAY modify or omit this prompt.',
    )
    temperature: float | None = None
    toolChoice: ToolChoice | None = Field(
        None,
        description='Controls how the model uses tools.\nThe client MUST return an error if this field is provided but {@link ClientCapabilities.sampling.tools} is not declared.\nDefault is `{ mode: "auto" }`.',
    )
    tools: list[Tool] | None = Field(
        None,
        description='Tools that the model may use during generation.\nThe client MUST return an error if this field is provided but {@link ClientCapabilities.sampling.tools} is not declared.',
    )


class DetailedTask(
    RootModel[
        DetailedTask1 | DetailedTask2 | DetailedTask3 | DetailedTask4 | DetailedTask5
    ]
):
    root: DetailedTask1 | DetailedTask2 | DetailedTask3 | DetailedTask4 | DetailedTask5


class GetTaskResult8(GetTaskResult2, GetTaskResult6):
    pass


class TaskStatusNotificationParams8(
    TaskStatusNotificationParams2, TaskStatusNotificationParams6
):
    pass


class Params28(Params22, Params26):
    model_config = ConfigDict(
        extra='allow',
    )
    __annotations__ = {
        '__pydantic_extra__': Dict[str, Any],
    }


class InputRequest(RootModel[CreateMessageRequest | ListRootsRequest | ElicitRequest]):
    root: CreateMessageRequest | ListRootsRequest | ElicitRequest


class GetTaskResult(
    RootModel[
        GetTaskResult7
        | GetTaskResult8
        | GetTaskResult9
        | GetTaskResult10
        | GetTaskResult11
    ]
):
    root: (
        GetTaskResult7
        | GetTaskResult8
        | GetTaskResult9
        | GetTaskResult10
        | GetTaskResult11
    )


class TaskStatusNotificationParams(
    RootModel[
        TaskStatusNotificationParams7
        | TaskStatusNotificationParams8
        | TaskStatusNotificationParams9
        | TaskStatusNotificationParams10
        | TaskStatusNotificationParams11
    ]
):
    root: (
        TaskStatusNotificationParams7
        | TaskStatusNotificationParams8
        | TaskStatusNotificationParams9
        | TaskStatusNotificationParams10
        | TaskStatusNotificationParams11
    )


class Params2(RootModel[Params27 | Params28 | Params29 | Params210 | Params211]):
    root: Params27 | Params28 | Params29 | Params210 | Params211


class InputRequests(RootModel[dict[str, InputRequest]]):
    root: dict[str, InputRequest]


class JSONObject(RootModel[dict[str, "JSONValue"]]):
    root: dict[str, "JSONValue"]


class JSONValue(RootModel[Union[JSONObject, list["JSONValue"], str, int, bool]]):
    root: Union[JSONObject, list["JSONValue"], str, int, bool]


DetailedTask2.model_rebuild()
GetTaskResult2.model_rebuild()
InputRequiredTask.model_rebuild()
TaskStatusNotificationParams2.model_rebuild()
Params22.model_rebuild()
TaskStatusNotification.model_rebuild()
CreateMessageRequest.model_rebuild()
CreateMessageRequestParams.model_rebuild()
GetTaskResult8.model_rebuild()
TaskStatusNotificationParams8.model_rebuild()
Params28.model_rebuild()
JSONObject.model_rebuild()
