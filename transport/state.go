package transport

import (
	"errors"
	"fmt"
)

// ErrInvalidArgument is the errno-like class of every rejected Modify or
// Post call (ibv_modify_qp / ibv_post_send return EINVAL).
var ErrInvalidArgument = errors.New("invalid argument")

// ModifyError explains why a Modify call was rejected.
type ModifyError struct {
	From, To State
	Missing  AttrMask // required attributes that were not given
	Extra    AttrMask // attributes that this transition does not accept
	Reason   string
}

func (e *ModifyError) Error() string {
	s := fmt.Sprintf("modify QP %v->%v", e.From, e.To)
	if e.Missing != 0 {
		s += fmt.Sprintf(": missing attributes %v", e.Missing)
	}
	if e.Extra != 0 {
		s += fmt.Sprintf(": attributes not allowed in this transition %v", e.Extra)
	}
	if e.Reason != "" {
		s += ": " + e.Reason
	}
	return s
}

func (e *ModifyError) Unwrap() error { return ErrInvalidArgument }

var attrMaskNames = []string{"STATE", "CUR_STATE", "EN_SQD_ASYNC_NOTIFY", "ACCESS_FLAGS", "PKEY_INDEX",
	"PORT", "QKEY", "AV", "PATH_MTU", "TIMEOUT", "RETRY_CNT", "RNR_RETRY", "RQ_PSN", "MAX_QP_RD_ATOMIC",
	"ALT_PATH", "MIN_RNR_TIMER", "SQ_PSN", "MAX_DEST_RD_ATOMIC", "PATH_MIG_STATE", "CAP", "DEST_QPN"}

// String joins the names of the attributes in m with '|' (ibv_qp_attr_mask
// names without IBV_QP_), or returns "0". AttrMask is a bit set, which
// stringer does not format, so this one is hand-written.
func (m AttrMask) String() string {
	s := ""
	for i, n := range attrMaskNames {
		if m&(1<<i) != 0 {
			if s != "" {
				s += "|"
			}
			s += n
		}
	}
	if s == "" {
		return "0"
	}
	return s
}

// transition lists the required and optional attributes of one RC state
// transition, as ib_modify_qp_is_ok's qp_state_table does
// (drivers/infiniband/core/verbs.c).
type transition struct {
	ok            bool
	req, optional AttrMask
}

var rcTransitions = func() (t [7][7]transition) {
	for from := range t {
		t[from][StateReset] = transition{ok: true}
		t[from][StateErr] = transition{ok: true}
	}
	// qp_state_table has no RESET→ERR entry: a QP in RESET can only go to
	// RESET or INIT.
	t[StateReset][StateErr] = transition{}
	t[StateReset][StateInit] = transition{ok: true, req: AttrPKeyIndex | AttrPort | AttrAccessFlags}
	t[StateInit][StateInit] = transition{ok: true, optional: AttrPKeyIndex | AttrPort | AttrAccessFlags}
	t[StateInit][StateRTR] = transition{ok: true,
		req:      AttrAV | AttrPathMTU | AttrDestQPN | AttrRQPSN | AttrMaxDestRdAtomic | AttrMinRNRTimer,
		optional: AttrAltPath | AttrAccessFlags | AttrPKeyIndex}
	t[StateRTR][StateRTS] = transition{ok: true,
		req:      AttrTimeout | AttrRetryCnt | AttrRNRRetry | AttrSQPSN | AttrMaxQPRdAtomic,
		optional: AttrCurState | AttrAltPath | AttrAccessFlags | AttrMinRNRTimer | AttrPathMigState}
	t[StateRTS][StateRTS] = transition{ok: true,
		optional: AttrCurState | AttrAccessFlags | AttrAltPath | AttrPathMigState | AttrMinRNRTimer}
	t[StateRTS][StateSQD] = transition{ok: true, optional: AttrEnSQDAsyncNotify}
	t[StateSQD][StateRTS] = transition{ok: true,
		optional: AttrCurState | AttrAltPath | AttrAccessFlags | AttrMinRNRTimer | AttrPathMigState}
	t[StateSQD][StateSQD] = transition{ok: true,
		optional: AttrPort | AttrAV | AttrAltPath | AttrAccessFlags | AttrPKeyIndex | AttrMinRNRTimer | AttrPathMigState |
			AttrTimeout | AttrRetryCnt | AttrRNRRetry | AttrMaxQPRdAtomic | AttrMaxDestRdAtomic}
	return t
}()

// ucTransitions is qp_state_table's UC column: RC's transitions without
// the attributes of reliability (ACK timeout, retry and RNR counts,
// READ/atomic depths, the RNR timer).
var ucTransitions = func() (t [7][7]transition) {
	for from := range t {
		t[from][StateReset] = transition{ok: true}
		t[from][StateErr] = transition{ok: true}
	}
	t[StateReset][StateErr] = transition{}
	t[StateReset][StateInit] = transition{ok: true, req: AttrPKeyIndex | AttrPort | AttrAccessFlags}
	t[StateInit][StateInit] = transition{ok: true, optional: AttrPKeyIndex | AttrPort | AttrAccessFlags}
	t[StateInit][StateRTR] = transition{ok: true,
		req:      AttrAV | AttrPathMTU | AttrDestQPN | AttrRQPSN,
		optional: AttrAltPath | AttrAccessFlags | AttrPKeyIndex}
	t[StateRTR][StateRTS] = transition{ok: true,
		req:      AttrSQPSN,
		optional: AttrCurState | AttrAltPath | AttrAccessFlags | AttrPathMigState}
	t[StateRTS][StateRTS] = transition{ok: true,
		optional: AttrCurState | AttrAccessFlags | AttrAltPath | AttrPathMigState}
	t[StateRTS][StateSQD] = transition{ok: true, optional: AttrEnSQDAsyncNotify}
	t[StateSQD][StateRTS] = transition{ok: true,
		optional: AttrCurState | AttrAltPath | AttrAccessFlags | AttrPathMigState}
	t[StateSQD][StateSQD] = transition{ok: true,
		optional: AttrPort | AttrAV | AttrAltPath | AttrAccessFlags | AttrPKeyIndex | AttrPathMigState}
	return t
}()

// checkUCTransition validates mask for cur→next of a UC QP like
// ib_modify_qp_is_ok. IBTA's SQE state (a UC send error) is not used: a
// local error moves a goroce UC QP to ERR, as on RC.
func checkUCTransition(cur, next State, mask AttrMask) error {
	return checkTransitionIn(&ucTransitions, "UC", cur, next, mask)
}

// checkTransition validates mask for cur→next of an RC QP like
// ib_modify_qp_is_ok.
func checkTransition(cur, next State, mask AttrMask) error {
	return checkTransitionIn(&rcTransitions, "RC", cur, next, mask)
}

// checkTransitionIn validates mask for cur→next in the table of one QP type.
func checkTransitionIn(table *[7][7]transition, typ string, cur, next State, mask AttrMask) error {
	if cur > StateErr || next > StateErr || cur == StateSQE || next == StateSQE {
		return &ModifyError{From: cur, To: next, Reason: "state not used by " + typ + " QPs"}
	}
	tr := table[cur][next]
	if !tr.ok {
		return &ModifyError{From: cur, To: next, Reason: "transition not allowed"}
	}
	m := mask &^ (AttrState | AttrCap)
	if missing := tr.req &^ m; missing != 0 {
		return &ModifyError{From: cur, To: next, Missing: missing}
	}
	if extra := m &^ (tr.req | tr.optional); extra != 0 {
		return &ModifyError{From: cur, To: next, Extra: extra}
	}
	return nil
}
