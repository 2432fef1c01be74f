package main

// Download missing debug files from DEBUGINFOD_URLS in process.
import _ "github.com/rawstack/rawstack/symbolizer/fetch/httpfetch"
