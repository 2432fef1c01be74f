package symsrv

// The symbol server tests download in process, as library users do.
import _ "github.com/rawstack/rawstack/symbolizer/fetch/httpfetch"
