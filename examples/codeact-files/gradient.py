# What "the model" wrote for the codeact-files example: a 64x64 gradient
# PNG from the standard library alone, so any image with python3 runs it.
import struct
import zlib


def chunk(kind, data):
    body = kind + data
    return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body) & 0xFFFFFFFF)


w = h = 64
rows = b"".join(
    b"\x00" + bytes(v for x in range(w) for v in (x * 4, y * 4, 160)) for y in range(h)
)
png = (
    b"\x89PNG\r\n\x1a\n"
    + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
    + chunk(b"IDAT", zlib.compress(rows))
    + chunk(b"IEND", b"")
)
with open("gradient.png", "wb") as f:
    f.write(png)
print("wrote gradient.png,", len(png), "bytes")
