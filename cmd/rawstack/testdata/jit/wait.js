// Three JavaScript calls deep, prints its own stack (V8's Error.stack),
// then blocks in Atomics.wait on the same line: a snapshot of the waiting
// thread must name the same frames at the same lines.
const cell = new Int32Array(new SharedArrayBuffer(4));
function c() { process.stdout.write(new Error().stack + "\n"); Atomics.wait(cell, 0, 0, 30000); }
function b() { c(); }
const a = () => { b(); };
a();
