// Empty: lets the package declare the runtime functions it links to (go:linkname) without bodies.
