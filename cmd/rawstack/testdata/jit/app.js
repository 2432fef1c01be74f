// A CPU-bound Node program whose time goes to one JIT-compiled function,
// fibJit: rawstack's JIT tests record it with --perf-basic-prof or
// --perf-prof and compare the share of samples naming fibJit with perf's.
// The work is a fixed amount (argv[2] rounds), not a duration, so the
// share does not depend on how loaded the machine is.
function fibJit(n) { return n < 2 ? n : fibJit(n - 1) + fibJit(n - 2); }
const rounds = Number(process.argv[2] || 100);
let s = 0;
for (let i = 0; i < rounds; i++) s += fibJit(25);
console.log(s > 0 ? "ok" : "no");
