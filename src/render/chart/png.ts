import { deflateSync } from 'node:zlib';

/**
 * Minimal PNG encoder (RFC 2083 / PNG spec 2nd ed.): 8-bit RGBA, one IDAT, filter chosen per row.
 * node:zlib does the deflate, so there is no native dependency and no canvas.
 */

const signature = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);

const crcTable = (() => {
  const table = new Uint32Array(256);
  for (let n = 0; n < 256; n++) {
    let c = n;
    for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
    table[n] = c >>> 0;
  }
  return table;
})();

export function crc32(bytes: Uint8Array, start = 0, end = bytes.length): number {
  let c = 0xffffffff;
  for (let i = start; i < end; i++) c = crcTable[(c ^ bytes[i]!) & 0xff]! ^ (c >>> 8);
  return (c ^ 0xffffffff) >>> 0;
}

function chunk(type: string, data: Uint8Array): Buffer {
  const out = Buffer.alloc(12 + data.length);
  out.writeUInt32BE(data.length, 0);
  out.write(type, 4, 'ascii');
  out.set(data, 8);
  out.writeUInt32BE(crc32(out, 4, 8 + data.length), 8 + data.length);
  return out;
}

/** Encodes straight (non-premultiplied) RGBA pixels, row-major, `width * height * 4` bytes. */
export function encodePng(width: number, height: number, rgba: Uint8Array): Buffer {
  if (rgba.length !== width * height * 4) throw new Error('encodePng: pixel buffer size does not match dimensions');
  const ihdr = Buffer.alloc(13);
  ihdr.writeUInt32BE(width, 0);
  ihdr.writeUInt32BE(height, 4);
  ihdr[8] = 8; // bit depth
  ihdr[9] = 6; // colour type: RGBA
  ihdr[10] = 0; // deflate
  ihdr[11] = 0; // adaptive filtering
  ihdr[12] = 0; // no interlace
  const idat = deflateSync(filterRows(width, height, rgba), { level: 6 });
  return Buffer.concat([signature, chunk('IHDR', ihdr), chunk('IDAT', idat), chunk('IEND', new Uint8Array(0))]);
}

/**
 * Each row gets the filter (None, Sub or Up) that leaves the fewest non-zero pixels, a pixel-level
 * variant of the minimum-residual heuristic of the PNG spec §12.8. Charts are large runs of one colour,
 * so comparing whole 32-bit pixels is both a good predictor and cheap, and pixels equal to their
 * predictor need no work at all (the output starts zeroed).
 */
function filterRows(width: number, height: number, rgba: Uint8Array): Uint8Array {
  const stride = width * 4;
  const out = new Uint8Array((stride + 1) * height);
  const aligned = rgba.byteOffset % 4 === 0 ? rgba : new Uint8Array(rgba);
  const words = new Uint32Array(aligned.buffer, aligned.byteOffset, aligned.length >> 2);
  const zeros = new Uint32Array(width);
  for (let y = 0; y < height; y++) {
    const cur = words.subarray(y * width, (y + 1) * width);
    const prev = y > 0 ? words.subarray((y - 1) * width, y * width) : zeros;
    let none = 0;
    let sub = 0;
    let up = 0;
    for (let x = 0; x < width; x++) {
      const w = cur[x]!;
      if (w !== 0) none++;
      if (w !== (x > 0 ? cur[x - 1]! : 0)) sub++;
      if (w !== prev[x]!) up++;
    }
    const filter = sub <= up && sub <= none ? 1 : up <= none ? 2 : 0;
    const offset = y * (stride + 1);
    out[offset] = filter;
    const src = y * stride;
    for (let x = 0; x < width; x++) {
      const w = cur[x]!;
      const predictor = filter === 1 ? (x > 0 ? cur[x - 1]! : 0) : filter === 2 ? prev[x]! : 0;
      if (w === predictor) continue;
      const o = offset + 1 + x * 4;
      const i = src + x * 4;
      const left = x > 0 ? i - 4 : -1;
      for (let c = 0; c < 4; c++) {
        const p = filter === 1 ? (left >= 0 ? aligned[left + c]! : 0) : filter === 2 ? (y > 0 ? aligned[i - stride + c]! : 0) : 0;
        out[o + c] = aligned[i + c]! - p;
      }
    }
  }
  return out;
}
