"""The wire format, `milktea.compressors.packet`, under its short name.

Importing it loads `milktea.compressors`, whose codec records say which header byte is
which codec: reading a packet never depends on what else happens to be imported.
"""
from milktea.compressors.packet import (DTYPES, MAGIC, MAX_FIELD, MAX_NUMEL, VERSION,  # noqa: F401
                                        Packet, parse_header, varint_size)
from milktea.compressors.codec import FIRST_USER_ID, SPARSE_EXPANSION, Codec, codec_ids, lookup  # noqa: F401

__all__ = ["Packet", "parse_header", "varint_size", "DTYPES", "MAGIC", "VERSION", "MAX_NUMEL", "MAX_FIELD",
           "FIRST_USER_ID", "SPARSE_EXPANSION", "Codec", "codec_ids", "lookup"]
