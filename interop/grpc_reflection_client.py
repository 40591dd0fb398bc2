"""A gRPC client that knows nothing of ptyhub but an address and a token.

It learns the services from server reflection (grpcio-reflection speaks only
grpc.reflection.v1alpha), builds the message classes from the descriptors the server
sends, and calls the session service with them: what `grpcurl` or a Python user without
our .proto files would do. Exits non-zero, with the reason, when any step fails.

Usage: grpc_reflection_client.py HOST:PORT TOKEN
"""

import sys

import grpc
from google.protobuf import message_factory
from google.protobuf.descriptor_pool import DescriptorPool
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import (
    ProtoReflectionDescriptorDatabase,
)

SESSION_API = "ptyhub.session.v1.SessionApi"
HEALTH = "grpc.health.v1.Health"
TIMEOUT_SECONDS = 30


def unary_call(channel, pool, service_name, method_name, fields, metadata):
    """Calls SERVICE/METHOD with a request built from the reflected descriptors."""
    method = pool.FindServiceByName(service_name).FindMethodByName(method_name)
    request_class = message_factory.GetMessageClass(method.input_type)
    response_class = message_factory.GetMessageClass(method.output_type)
    call = channel.unary_unary(
        f"/{service_name}/{method_name}",
        request_serializer=request_class.SerializeToString,
        response_deserializer=response_class.FromString,
    )
    return call(request_class(**fields), metadata=metadata, timeout=TIMEOUT_SECONDS)


def main(target, token):
    channel = grpc.insecure_channel(target)
    grpc.channel_ready_future(channel).result(timeout=TIMEOUT_SECONDS)
    database = ProtoReflectionDescriptorDatabase(channel)
    services = sorted(database.get_services())
    print(f"reflection v1alpha lists: {', '.join(services)}")
    for expected in (SESSION_API, HEALTH):
        if expected not in services:
            raise SystemExit(f"reflection does not list {expected}")

    pool = DescriptorPool(database)
    health = unary_call(channel, pool, HEALTH, "Check", {"service": ""}, metadata=())
    print(f"health: {health}".strip())
    if health.status != 1:  # SERVING
        raise SystemExit(f"health answered {health.status}, not SERVING")

    authorization = [("authorization", f"Bearer {token}")]
    instances = unary_call(channel, pool, SESSION_API, "ListInstances", {}, authorization)
    names = [instance.name for instance in instances.instances]
    print(f"ListInstances: {names}")
    if "local" not in names:
        raise SystemExit("ListInstances did not return the local instance")

    try:
        unary_call(channel, pool, SESSION_API, "ListInstances", {}, [("authorization", "Bearer wrong")])
    except grpc.RpcError as error:
        if error.code() != grpc.StatusCode.UNAUTHENTICATED:
            raise SystemExit(f"a wrong token got {error.code()}, not UNAUTHENTICATED")
        print("a wrong token: UNAUTHENTICATED")
    else:
        raise SystemExit("a wrong token was accepted")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    main(sys.argv[1], sys.argv[2])
