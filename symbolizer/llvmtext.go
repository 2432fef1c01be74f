package symbolizer

import "strconv"

// AppendLLVM appends the text llvm-symbolizer prints for one address with
// the given frames (its default output style): for each frame the
// function name, then file:line:column, "??" for an unknown name or file,
// and a blank line after the address. An address without frames prints
// as one unknown frame.
func AppendLLVM(dst []byte, frames []Frame) []byte {
	if len(frames) == 0 {
		dst = appendLLVMFrame(dst, Frame{})
	}
	for _, f := range frames {
		dst = appendLLVMFrame(dst, f)
	}
	return append(dst, '\n')
}

func appendLLVMFrame(dst []byte, f Frame) []byte {
	if f.Function == "" {
		dst = append(dst, "??"...)
	} else {
		dst = append(dst, f.Function...)
	}
	dst = append(dst, '\n')
	if f.File == "" {
		dst = append(dst, "??"...)
	} else {
		dst = append(dst, f.File...)
	}
	dst = append(dst, ':')
	dst = strconv.AppendInt(dst, int64(f.Line), 10)
	dst = append(dst, ':')
	dst = strconv.AppendInt(dst, int64(f.Column), 10)
	return append(dst, '\n')
}
