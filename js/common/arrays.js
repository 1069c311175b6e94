// Numpy arrays arrive from Python as {dtype, shape, buffer} where buffer is a DataView over
// binary message bytes (see activis/widgets/_arrays.py). Never JSON lists of numbers.
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

/** Decode a serialised array into {data: TypedArray, shape: number[]} (null stays null). */
export function decodeArray(value) {
  if (!value) return null;
  const Ctor = TYPED[value.dtype];
  if (!Ctor) throw new Error(`activis: unsupported array dtype ${value.dtype}`);
  const raw = value.buffer;
  const view = raw instanceof DataView ? raw : new DataView(raw.buffer ?? raw);
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

/** Encode a typed array for Python (arrives as numpy through array_from_json). */
export function encodeArray(typed, dtype) {
  return { dtype, shape: [typed.length], buffer: new DataView(typed.buffer, typed.byteOffset, typed.byteLength) };
}
