package pingpong

import "strconv"

// wcStatusStrings are libibverbs' ibv_wc_status_str (libibverbs/enum_strs.c),
// indexed by enum ibv_wc_status.
var wcStatusStrings = [...]string{
	"success",
	"local length error",
	"local QP operation error",
	"local EE context operation error",
	"local protection error",
	"Work Request Flushed Error",
	"memory management operation error",
	"bad response error",
	"local access error",
	"remote invalid request error",
	"remote access error",
	"remote operation error",
	"transport retry counter exceeded",
	"RNR retry counter exceeded",
	"local RDD violation error",
	"remote invalid RD request",
	"aborted error",
	"invalid EE context number",
	"invalid EE context state",
	"fatal error",
	"response timeout error",
	"general error",
	"TM error",
	"TM software rendezvous",
}

// WCStatusString is ibv_wc_status_str: the text rc_pingpong prints in
// "Failed status %s (%d) for wr_id %d".
func WCStatusString(status int) string {
	if status >= 0 && status < len(wcStatusStrings) {
		return wcStatusStrings[status]
	}
	return "unknown"
}

// FormatFailedStatus is parse_single_wc's message for a completion in
// error, with its newline: "Failed status %s (%d) for wr_id %d\n".
func FormatFailedStatus(status int, wrID uint64) string {
	return "Failed status " + WCStatusString(status) + " (" + strconv.Itoa(status) + ") for wr_id " +
		strconv.Itoa(int(int32(wrID))) + "\n"
}

// FormatInvalidPage is the -c check's complaint for one page:
// "invalid data in page %d\n".
func FormatInvalidPage(page int) string {
	return "invalid data in page " + strconv.Itoa(page) + "\n"
}
