// @ts-check
// Numpy arrays arrive from Python as {dtype, shape, buffer} where buffer is a DataView over
// binary message bytes (see activis/widgets/_arrays.py). Never JSON lists of numbers.
/** @type {Record<string, any>} */
const TYPED = {
  float32: Float32Array,
  float64: Float64Array,
  int8: Int8Array,
  uint8: Uint8Array,
  int16: Int16Array,
  uint16: Uint16Array,
  int32: Int32Array,
  uint32: Uint32Array,
};

/**
 * @typedef {Float32Array | Float64Array | Int8Array | Uint8Array | Int16Array | Uint16Array | Int32Array
 *   | Uint32Array} Typed
 * @typedef {{ data: Typed, shape: number[] }} Decoded
 * @typedef {{ dtype: string, shape: number[], buffer: DataView | ArrayBuffer | Uint8Array }} Serialised
 */

/**
 * Decode a serialised array into {data: TypedArray, shape: number[]} (null stays null).
 * @param {Serialised | null | undefined} value
 * @returns {Decoded | null}
 */
export function decodeArray(value) {
  if (!value) return null;
  const Ctor = TYPED[value.dtype];
  if (!Ctor) throw new Error(`activis: unsupported array dtype ${value.dtype}`);
  const raw = value.buffer;
  const view = raw instanceof DataView ? raw
    : raw instanceof ArrayBuffer ? new DataView(raw) : new DataView(raw.buffer, raw.byteOffset, raw.byteLength);
  const length = Math.floor(view.byteLength / Ctor.BYTES_PER_ELEMENT);
  let data;
  if (view.byteOffset % Ctor.BYTES_PER_ELEMENT === 0) {
    data = new Ctor(view.buffer, view.byteOffset, length);
  } else {
    // unaligned view into a message: copy once so typed access is legal
    data = new Ctor(view.buffer.slice(view.byteOffset, view.byteOffset + length * Ctor.BYTES_PER_ELEMENT));
  }
  return { data, shape: value.shape };
}

/**
 * Encode a typed array for Python (arrives as numpy through array_from_json).
 * @param {Typed} typed
 * @param {string} dtype
 */
export function encodeArray(typed, dtype) {
  return { dtype, shape: [typed.length], buffer: new DataView(typed.buffer, typed.byteOffset, typed.byteLength) };
}
