"""Decode+encode cost per small request: .venv/bin/python tests/wire/bench_codec.py"""
import io, sys, timeit
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / 'src'))
from kio.serial import entity_writer
from tidemark.wire.codec import decode_request, encode_response, KIO_API_RANGES
from kio.schema.request_header.v2 import RequestHeader as H2
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.metadata.v12.response import MetadataResponse, MetadataResponseBroker, MetadataResponseTopic, MetadataResponsePartition
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.api_versions.v3.response import ApiVersionsResponse, ApiVersion
from kio.schema.errors import ErrorCode
from kio.static.primitive import i32Timedelta
import datetime, uuid
def req(body, key, ver):
    b = io.BytesIO(); entity_writer(H2)(b, H2(request_api_key=key, request_api_version=ver, correlation_id=5, client_id="bench")); entity_writer(type(body))(b, body); return b.getvalue()
supported = dict(KIO_API_RANGES)
m = req(MetadataRequest(topics=(MetadataRequestTopic(topic_id=None, name="orders"),), allow_auto_topic_creation=False, include_topic_authorized_operations=False), 3, 12)
resp = MetadataResponse(throttle_time=i32Timedelta.parse(datetime.timedelta(0)), brokers=(MetadataResponseBroker(node_id=1, host="127.0.0.1", port=9092, rack=None),), cluster_id="c", controller_id=1,
  topics=(MetadataResponseTopic(error_code=ErrorCode.none, name="orders", topic_id=uuid.uuid4(), is_internal=False, partitions=(MetadataResponsePartition(error_code=ErrorCode.none, partition_index=0, leader_id=1, leader_epoch=0, replica_nodes=(1,), isr_nodes=(1,), offline_replicas=()),), topic_authorized_operations=-2147483648),))
a = req(ApiVersionsRequest(client_software_name="bench", client_software_version="1.0"), 18, 3)
aresp = ApiVersionsResponse(error_code=ErrorCode.none, api_keys=tuple(ApiVersion(api_key=k, min_version=lo, max_version=hi) for k,(lo,hi) in supported.items()), throttle_time=i32Timedelta.parse(datetime.timedelta(0)))
n = 20000
for name, frame, body in [("Metadata v12", m, resp), ("ApiVersions v3", a, aresp)]:
    decode_request(frame, supported)
    t_dec = timeit.timeit(lambda: decode_request(frame, supported), number=n) / n * 1e6
    r = decode_request(frame, supported)
    t_enc = timeit.timeit(lambda: encode_response(r, body), number=n) / n * 1e6
    print(f"{name}: decode {t_dec:.1f} us, encode {t_enc:.1f} us, total {t_dec+t_enc:.1f} us")
