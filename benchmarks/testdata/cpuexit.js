// Preloaded (node --require) by the jitcost benchmark: prints "ok" and
// the CPU seconds the process took when it exits.
process.on("exit", () => {
  const u = process.cpuUsage();
  console.log("ok", (u.user + u.system) / 1e6);
});
