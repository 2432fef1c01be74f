// The jit scenario's cost workload (benchmarks/jit.go): shop.js's chain
// (handle -> total -> Price.mix, which TurboFan inlines into one
// function), a fixed amount of work (argv[2] rounds); it prints the CPU
// seconds it took (process.cpuUsage).
class Price {
  constructor(rate) { this.rate = rate; }
  mix(x, i) {
    let h = x ^ this.rate;
    for (let k = 0; k < 40; k++) h = (h * 31 + k + i) | 0;
    return h;
  }
}
const price = new Price(7);
const total = (cart, i) => {
  let t = 0;
  for (let j = 0; j < cart.length; j++) t = (t + price.mix(cart[j], i)) | 0;
  return t;
};
function handle(req) { return total(req.cart, req.id); }
const rounds = Number(process.argv[2] || 2000000);
const cart = [1, 2, 3, 4, 5, 6, 7, 8];
let s = 0;
for (let i = 0; i < rounds; i++) s = (s + handle({ id: i, cart })) | 0;
const u = process.cpuUsage();
console.log(s !== 1 ? "ok" : "no", (u.user + u.system) / 1e6);
