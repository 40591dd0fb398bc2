"""The official MCP Python SDK (PyPI `mcp`) as an agent uses ptyhub: against the gateway's `/mcp`
(Streamable HTTP, with the token) or through `ptyhub mcp` (stdio), in the protocol revision the
SDK negotiates by itself (`auto`) or the 2025 one with a session (`legacy`).

    mcp_client.py http URL TOKEN INSTANCE SESSION MODE
    mcp_client.py stdio PTYHUB DATA_DIR INSTANCE SESSION MODE

SESSION is a live session of INSTANCE whose shell (bash, with ptyhub's shell integration) is at
its prompt; TOKEN an admin's. Over HTTP the client also shares the instance (REST) and connects
with the share link's token, which sees the read tools alone. Every check raises on failure, so
the exit status says whether all held; each passing check prints one `ok` line.
"""

import asyncio
import sys

import httpx2
import mcp.types as types
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

TOOLS = {
    "list_instances",
    "list_sessions",
    "create_session",
    "read_screen",
    "send_input",
    "wait_for",
    "run_command",
    "list_commands",
    "close_session",
    "control_state",
    "request_control",
    "grant_control",
}
READ_TOOLS = {"list_instances", "list_sessions", "read_screen", "wait_for", "control_state"}
# How long a change notification may take to come (a screen wait answers within milliseconds).
NOTIFICATION_PATIENCE_S = 20


def ok(what):
    print(f"ok {what}", flush=True)


def check(condition, what, shown=None):
    if not condition:
        raise AssertionError(f"{what}: {shown!r}")
    ok(what)


def http_transport(url, token):
    client = httpx2.AsyncClient(
        headers={"Authorization": f"Bearer {token}"},
        timeout=httpx2.Timeout(30.0, read=300.0),
    )
    return streamable_http_client(f"{url}/mcp", http_client=client)


def tool_error_detail(result):
    """The contract's detail of a tool error, which must be one."""
    check(result.is_error, "a refusal is a tool error", result)
    return result.content[0].text


async def call(client, name, arguments):
    return await client.call_tool(name, arguments)


async def expect_notification(client, notifications, uri, instance, session):
    """Subscribes to the screen `uri` as the negotiated revision does (a session's
    `resources/subscribe` before 2026-07-28, `subscriptions/listen` from it on), types, and waits
    for the screen's change notification."""
    if client.protocol_version < "2026-07-28":
        await client.subscribe_resource(uri)
        await call(client, "send_input", {"instance": instance, "session": session, "text": "echo changed", "keys": ["Enter"]})
        updated = await asyncio.wait_for(notifications.get(), NOTIFICATION_PATIENCE_S)
        check(updated == uri, "resources/subscribe: the screen's change is notified", updated)
        await client.unsubscribe_resource(uri)
        return
    async with client.listen(resource_subscriptions=[uri]) as subscription:
        await call(client, "send_input", {"instance": instance, "session": session, "text": "echo changed", "keys": ["Enter"]})

        async def first_event():
            async for event in subscription:
                return event

        event = await asyncio.wait_for(first_event(), NOTIFICATION_PATIENCE_S)
        check(getattr(event, "uri", None) == uri, "subscriptions/listen: the screen's change is notified", event)


async def drive(client, notifications, instance, session):
    listed = await client.list_tools()
    names = {tool.name for tool in listed.tools}
    check(names == TOOLS, "every tool is listed", names)
    without = [tool.name for tool in listed.tools if tool.input_schema.get("type") != "object" or not tool.output_schema]
    check(not without, "every tool has input and output schemas", without)

    instances = await call(client, "list_instances", {})
    check(any(listed["name"] == instance for listed in instances.structured_content["instances"]), "list_instances names the instance", instances.structured_content)

    ran = await call(client, "run_command", {"instance": instance, "session": session, "command": "sh -c 'echo out; exit 3'", "timeout_ms": 20000})
    check(not ran.is_error, "run_command answers", ran.content)
    check(ran.structured_content["exit_code"] == 3, "run_command: the exit code", ran.structured_content)
    check(ran.structured_content["output"].strip() == "out", "run_command: the output", ran.structured_content)

    ran = await call(client, "run_command", {"instance": instance, "session": session, "command": "echo hi; false"})
    check(ran.structured_content["exit_code"] == 1 and "hi" in ran.structured_content["output"], "run_command: echo hi; false", ran.structured_content)

    screen = await call(client, "read_screen", {"instance": instance, "session": session})
    check("out" in screen.structured_content["text"], "read_screen shows the output", screen.structured_content)
    check(screen.structured_content["state"] == "at_prompt", "read_screen: the shell is at its prompt", screen.structured_content)

    waited = await call(client, "wait_for", {"instance": instance, "session": session, "for": "prompt", "timeout_ms": 10000})
    check(waited.structured_content["state"] == "at_prompt", "wait_for: the prompt", waited.structured_content)
    waited = await call(client, "wait_for", {"instance": instance, "session": session, "pattern": "out", "timeout_ms": 10000})
    check(waited.structured_content["matched"] == "out", "wait_for: a pattern", waited.structured_content)

    uri = f"ptyhub://instances/{instance}/sessions/{session}/screen"
    read = await client.read_resource(uri)
    check("out" in read.contents[0].text, "the screen resource reads as text", read.contents)
    await expect_notification(client, notifications, uri, instance, session)

    refused = await call(client, "read_screen", {"instance": instance, "session": "00000000-0000-4000-8000-000000000000"})
    check((refused.meta or {}).get("ptyhub/status") == 404 and refused.structured_content is None and "not found" in tool_error_detail(refused), "an unknown session is the contract's 404", refused.content)
    refused = await call(client, "wait_for", {"instance": instance, "session": session, "pattern": "(", "timeout_ms": 1000})
    check("regex" in tool_error_detail(refused) or "pattern" in tool_error_detail(refused), "a pattern that does not compile is refused", refused.content)
    refused = await call(client, "wait_for", {"instance": instance, "session": session, "timeout_ms": 300001})
    check(tool_error_detail(refused) == "timeout_ms must be 1 to 300000", "a timeout over the maximum is refused", refused.content)
    refused = await call(client, "run_command", {"instance": instance, "session": session, "command": "true", "timeout_ms": 300001})
    check(tool_error_detail(refused) == "timeout_ms must be 1 to 300000", "run_command: a timeout over the maximum is refused", refused.content)
    refused = await call(client, "send_input", {"instance": instance, "session": session, "keys": ["NoSuchKey"]})
    check(refused.is_error, "an unknown key is refused", refused.content)


async def drive_share(client, instance, session):
    listed = await client.list_tools()
    names = {tool.name for tool in listed.tools}
    check(names == READ_TOOLS, "a share link's credential lists the read tools alone", names)
    screen = await call(client, "read_screen", {"instance": instance, "session": session})
    check(not screen.is_error, "a share link's credential reads the screen", screen.content)
    refused = await call(client, "send_input", {"instance": instance, "session": session, "text": "x"})
    check(tool_error_detail(refused) == "typing is not allowed: this credential may only view", "a share link's credential cannot type", refused.content)


async def main(argv):
    transport_kind, target, credential, instance, session, mode = argv[1:7]
    notifications = asyncio.Queue()

    async def on_message(message):
        if isinstance(message, types.ServerNotification) and isinstance(message, types.ResourceUpdatedNotification):
            await notifications.put(message.params.uri)
        elif isinstance(getattr(message, "root", None), types.ResourceUpdatedNotification):
            await notifications.put(message.root.params.uri)

    if transport_kind == "http":
        server = http_transport(target, credential)
    else:
        server = StdioServerParameters(command=target, args=["--data-dir", credential, "mcp"])
    async with Client(server, mode=mode, message_handler=on_message) as client:
        ok(f"connected ({client.protocol_version})")
        await drive(client, notifications, instance, session)
    if transport_kind == "http":
        async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {credential}"}) as rest:
            shared = await rest.post(f"{target}/api/v1/instances/{instance}/shares", json={})
            check(shared.status_code == 201, "the instance is shared over REST", shared.text)
        async with Client(http_transport(target, shared.json()["token"]), mode=mode) as client:
            await drive_share(client, instance, session)


if __name__ == "__main__":
    asyncio.run(main(sys.argv))
