"""vprof's command line: click commands that parse, call the library and print."""
