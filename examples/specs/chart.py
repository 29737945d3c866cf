# Draws a small bar chart as a PNG with the standard library only (no
# plotting package in the host image): what a model's data job would write.
import os, struct, zlib

values = [3, 7, 4, 9, 6, 2, 8]
width, height, bar = 7 * 24, 120, 16
rows = []
for y in range(height):
    row = bytearray([0])  # filter: none
    for x in range(width):
        i, inside = divmod(x, 24)
        top = height - values[i] * 12
        on = inside < bar and y >= top
        row += bytes((40, 110, 200) if on else (250, 250, 250))
    rows.append(bytes(row))

def chunk(kind, data):
    body = kind + data
    return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
png += chunk(b"IDAT", zlib.compress(b"".join(rows))) + chunk(b"IEND", b"")
os.makedirs("out", exist_ok=True)
with open("out/chart.png", "wb") as f:
    f.write(png)
print("chart.png:", len(png), "bytes")
