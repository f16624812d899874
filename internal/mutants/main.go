// Command mutants proves that redlock's tests can fail: it applies
// deliberate bugs to a copy of the module, one at a time, and runs the tests
// that must catch each. It exits non-zero if any mutant survives (its tests
// still pass), or no longer applies (the code it targets changed: update the
// table), so a test that stopped testing anything is noticed.
//
//	go run ./internal/mutants            # every mutant (make mutants)
//	go run ./internal/mutants -run drift # those whose name contains "drift"
//	go run ./internal/mutants -generator 8000  # also the fault generator on each
//
// With -generator N, each mutant also meets N calls of the whole-API fault
// generator (TestChaos/20), which knows nothing of the bug: the report says
// whether it caught it too. Only the named tests decide the exit status.
//
// Each mutant is a literal replacement that must match exactly once. Most
// share one build, in which the environment chooses the mutant at run time
// (schemata.go); -alone builds each by itself, as the others always are:
// a copy that keeps only the tests that run (most of a build is the
// tests), built a few ahead while the tests run.
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"go/ast"
	"go/format"
	"go/parser"
	"go/token"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// A mutant is one deliberate bug and the tests that must catch it.
type mutant struct {
	name     string
	file     string // relative to the module root
	from, to string // from must occur exactly once in file
	killers  string // go test -run pattern; with a slash, a subtest's pattern as go test takes it
	pkg      string // the directory of the package whose tests are the killers, relative to the module root; "": enginePkg
}

// enginePkg is the package whose tests are most mutants' killers: the
// lock logic's (internal/engine).
const enginePkg = "internal/engine"

// testDir is the directory of the package whose tests are m's killers.
func (m mutant) testDir() string {
	if m.pkg == "" {
		return enginePkg
	}
	return m.pkg
}

var mutants = []mutant{
	// Issue 37: on the server, touch only what is ours; declare every key;
	// never switch the guard off in silence; a fresh deployment's rule.
	{
		name:    "failed-attempt-writes-the-holders-key",
		file:    "internal/script/lua/acquire.lua",
		from:    "mark(KEYS[1], KEYS[2], fp, ARGV[2])\n",
		to:      "redis.pcall('SET', KEYS[1], cur .. '~', 'KEEPTTL')\n",
		killers: "TestAWantedKeyIsStillTheHolders",
	},
	{
		name:    "guard-forgets-the-masters-the-client-knew",
		file:    "internal/core/tally.go",
		from:    "		case t.reported >= enough && !t.knownOlder(h.born):\n",
		to:      "		case t.reported >= enough:\n",
		killers: "TestYoungMastersBackEmptyDoNotOutvoteAKnownWitness",
	},
	// The public package forwards to internal/engine.
	{
		name:    "facade-wraps-a-nil-lock",
		file:    "lock.go",
		from:    "\tif l == nil {\n\t\treturn nil\n\t}\n\treturn &Lock{l: l}",
		to:      "\treturn &Lock{l: l}",
		killers: "TestEveryCallForwards",
		pkg:     ".",
	},
	// The protocol core (internal/core), each caught by the model checker
	// with a trace (TestProtocolModel runs it).
	{
		name:    "core-counts-a-minority",
		file:    "internal/core/validity.go",
		from:    "func Quorum(n int) int { return n/2 + 1 }",
		to:      "func Quorum(n int) int { return n / 2 }",
		killers: "TestProtocolModel",
	},
	{
		name:    "core-validity-from-the-decision",
		file:    "internal/core/validity.go",
		from:    "	return ValidUntil(start, ttl, factor), true\n",
		to:      "	return ValidUntil(decided, ttl, factor), true\n",
		killers: "TestProtocolModel",
	},
	{
		name:    "core-guard-counts-young-votes-while-an-older-master-answered",
		file:    "internal/core/tally.go",
		from:    "		if m.reported && m.born.Before(born.Add(-t.slack)) {\n",
		to:      "		if false && m.reported && m.born.Before(born.Add(-t.slack)) {\n",
		killers: "TestProtocolModel",
	},
	{
		name:    "core-extend-shortens-the-key",
		file:    "internal/model/master.go",
		from:    "var shortens = false",
		to:      "var shortens = true",
		killers: "TestProtocolModel",
	},
	{
		name:    "model-master-shortens-its-own-key",
		file:    "internal/model/master.go",
		from:    "	case m.Val == token:\n		m.Exp = max(m.Exp, now+ttl)\n",
		to:      "	case m.Val == token:\n		m.Exp = now + ttl\n",
		killers: "TestModelMastersAnswerAsRedisDoes",
	},
	{
		name:    "a-stale-wanted-key-counts",
		file:    "internal/script/lua/token.lua",
		from:    "  return type(m) == 'string' and m == fingerprint(v)\n",
		to:      "  return type(m) == 'string'\n",
		killers: "TestAStaleWantedKeyAnnouncesNothing",
	},
	{
		name:    "failed-multi-attempt-writes-the-holders-key",
		file:    "internal/script/lua/acquire_multi.lua",
		from:    "    mark(KEYS[i], KEYS[n + i], fingerprint(cur), ARGV[2])\n",
		to:      "    redis.pcall('PEXPIRE', KEYS[i], 3600000)\n",
		killers: "TestAFailedMultiAttemptLeavesTheHoldersKeysAsTheyWere",
	},
	{
		name:    "a-marker-read-fails-open",
		file:    "internal/script/lua/memory.lua",
		from:    "  local t = redis.call('TIME')\n",
		to:      "  local t = redis.pcall('TIME')\n  if t.err then\n    return -1, 0, 0\n  end\n",
		killers: "TestAVoteWhoseMarkerIsRefusedIsNoVote",
	},
	{
		name:    "a-wrong-type-marker-fails-open",
		file:    "internal/script/lua/memory.lua",
		from:    "  local v = redis.call('GET', marker)\n",
		to:      "  local v = redis.pcall('GET', marker)\n  if type(v) == 'table' and v.err then\n    return -1, 0, 0\n  end\n",
		killers: "TestAVoteWhoseMarkerIsRefusedIsNoVote",
	},
	{
		name:    "new-skips-the-guards-rights",
		file:    "internal/engine/identity.go",
		from:    "			if guard {\n",
		to:      "			if false {\n",
		killers: "TestNewRefusesAGuardWithoutItsMarker",
	},
	{
		name:    "fresh-deployment-rule-reversed",
		file:    "internal/core/tally.go",
		from:    "	enough := Witnessed(t.n) // I4\n",
		to:      "	enough := t.n // I4\n",
		killers: "TestFreshDeploymentWithOneMasterDownTakesALock|TestAYoungYesThatWouldCompleteTheMajorityIsHeldBack",
	},
	{
		name:    "guard-counts-young-votes-before-a-majority-reported",
		file:    "internal/core/tally.go",
		from:    "	enough := Witnessed(t.n) // I4\n",
		to:      "	enough := 1 // I4\n",
		killers: "TestAYoungYesThatWouldCompleteTheMajorityIsHeldBack",
	},
	{
		name:    "young-votes-count-at-a-majority-of-reports",
		file:    "internal/core/validity.go",
		from:    "func Witnessed(n int) int { return min(n, n-Quorum(n)+2) }",
		to:      "func Witnessed(n int) int { return Quorum(n) }",
		killers: "TestOneLossBesideMastersNeverMarkedIsRefused|TestProtocolModel",
	},
	{
		name:    "extend-asks-no-witness",
		file:    "internal/engine/extend.go",
		from:    "	return refused > 0 && known < core.Witnessed(len(l.holds))\n",
		to:      "	return false\n",
		killers: "TestFreshDeploymentWithOneMasterDownTakesALock",
	},
	{
		name:    "negative-age-is-no-report",
		file:    "internal/engine/guard.go",
		from:    "	case age == -1:\n		return memory{}\n",
		to:      "	case age < 0:\n		return memory{}\n",
		killers: "TestANegativeAgeIsTheYoungestMemory",
	},
	{
		name:    "memory-age-may-be-negative",
		file:    "internal/script/lua/memory.lua",
		from:    "      return math.max(0, now - born), longest, born\n",
		to:      "      return now - born, longest, born\n",
		killers: "TestMemoryScriptNeverReportsANegativeAge",
	},
	{
		name:    "new-accepts-evicting-masters",
		file:    "internal/engine/identity.go",
		from:    "	if !evicting {\n",
		to:      "	if false {\n",
		killers: "TestNewRefusesMastersThatMayEvict",
	},
	{
		name:    "strict-guard-is-the-default-rule",
		file:    "internal/core/tally.go",
		from:    "		enough = t.n\n",
		to:      "",
		killers: "TestSlowWitnessesStillKeepTheYoungOut|TestAYoungYesThatWouldCompleteTheMajorityIsHeldBack",
	},
	{
		name:    "quorum-first-extend-never-takes-the-reserves",
		file:    "internal/engine/extend.go",
		from:    "	if er.take != nil && h.ask() {",
		to:      "	if false && er.take != nil && h.ask() {",
		killers: "TestQuorumFirstExtendTakesTheKeyOnTheReserves|TestQuorumFirstExtendWithAMasterOfTheLockDown",
	},
	{
		name:    "quorum-first-unlock-leaves-the-reserves-askable",
		file:    "internal/engine/unlock.go",
		from:    "	l.giveUpReserves()\n",
		to:      "",
		killers: "TestQuorumFirstUnlockGivesTheReservesUp|TestQuorumFirstExtendRacingAHandOffLeavesNoTokenOnAReserve",
	},
	{
		name:    "quorum-first-a-failed-widening-is-never-retried",
		file:    "internal/engine/hold.go",
		from:    "		h.retake = !yes\n",
		to:      "		h.retake = false\n",
		killers: "TestQuorumFirstExtendAsksAgainAfterAFailedWidening|TestQuorumFirstCancelledWideningLeavesTheReservesAskable",
	},
	{
		name:    "quorum-first-ask-never-reopens-a-returned-call",
		file:    "internal/engine/hold.go",
		from:    "	case h.retake && h.finishedLocked():\n		h.retake = false",
		to:      "	case false && h.retake && h.finishedLocked():\n		h.retake = false",
		killers: "TestQuorumFirstExtendAsksAgainAfterAFailedWidening|TestHoldRetakeReopensTheCallOnce",
	},
	{
		name:    "quorum-first-unlock-leaves-a-retake-askable",
		file:    "internal/engine/hold.go",
		from:    "	h.closed = true\n",
		to:      "",
		killers: "TestHoldRetakeReopensTheCallOnce",
	},
	{
		name:    "extend-takes-masters-on-a-shorter-ttl",
		file:    "internal/engine/extend.go",
		from:    "	lengthens := validUntil(start, ttl, c.cfg.driftFactor).After(until)\n",
		to:      "	lengthens := true\n",
		killers: "TestExtendByLessThanTheValidityLeftTakesNoMaster",
	},
	{
		name:    "quorum-first-an-unsent-retake-forgets-the-failed-call",
		file:    "internal/engine/hold.go",
		from:    "		h.retake = true\n	}\n	close(h.done)",
		to:      "		h.retake = true\n	}\n	h.mayHold = false\n	close(h.done)",
		killers: "TestQuorumFirstUnsentRetakeStillReleasesWhatTheFailedCallLeft",
	},
	{
		name:    "quorum-first-a-handed-lock-never-widens",
		file:    "internal/engine/wanting.go",
		from:    "		if widen {\n			h.mayRetake()",
		to:      "		if false {\n			h.mayRetake()",
		killers: "TestQuorumFirstLockHandedToAnotherClientWidens",
	},
	{
		name:    "acquire-leaves-our-own-key-as-it-was",
		file:    "internal/script/lua/acquire.lua",
		from:    "    redis.call('PEXPIRE', KEYS[1], ARGV[2])\n",
		to:      "",
		killers: "TestQuorumFirstExtendAsksAgainAfterAFailedWidening",
	},
	{
		name:    "quorum-first-without-the-guard",
		file:    "internal/engine/quorumfirst.go",
		from:    "c.cfg.guard == 0 || ",
		to:      "",
		killers: "TestQuorumFirstWithoutTheGuardAsksEveryMaster",
	},
	{
		name:    "quorum-first-waits-for-the-hedge-after-a-no",
		file:    "internal/engine/quorumfirst.go",
		from:    "	if f.reserve != 0 && f.r.tally.Yes <= yes {",
		to:      "	if f.reserve != 0 && f.r.tally.Yes <= yes && v.err != nil {",
		killers: "TestQuorumFirstAsksTheReservesWhenAPreferredMasterRefuses",
	},
	{
		name:    "quorum-first-reserves-not-marked",
		file:    "internal/engine/acquire.go",
		from:    "				h.reserve() // never sent: Unlock skips it, Extend may ask it",
		to:      "				_ = h",
		killers: "TestQuorumFirstAsksAMajorityAndReleasesOnlyThere|TestQuorumFirstExtendTakesTheKeyOnTheReserves",
	},
	{
		name:    "quorum-first-hedge-marks-nothing-slow",
		file:    "internal/engine/quorumfirst.go",
		from:    "				if p && f.reserve&(1<<i) == 0 {\n					f.c.nodes[i].markSlow()",
		to:      "				if p && f.reserve&(1<<i) == 0 && false {\n					f.c.nodes[i].markSlow()",
		killers: "TestQuorumFirstHedgesAHungPreferredMaster",
	},
	{
		name:    "quorum-first-await-waits-on-a-reserve",
		file:    "internal/engine/hold.go",
		from:    "	if reserved {\n		// Never sent",
		to:      "	if reserved && false {\n		// Never sent",
		killers: "TestHoldReservedGoesToUnlockOrExtendOnce",
	},
	{
		name:    "extend-shortens-the-key",
		file:    "internal/script/lua/extend.lua",
		from:    "  if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[2]) then\n    redis.call('PEXPIRE', KEYS[1], ARGV[2])\n    if wanted(KEYS[2], cur) then\n      redis.call('PEXPIRE', KEYS[2], ARGV[2])\n    end\n  end",
		to:      "  redis.call('PEXPIRE', KEYS[1], ARGV[2])",
		killers: "TestExtendNeverShortensTheKeys|TestFailedExtendToAShorterTTLLeavesUntilTrue|TestConcurrentExtendsNeverLeaveUntilPastTheKeys",
	},
	{
		name:    "hand-off-abandons-the-old-holds",
		file:    "internal/engine/handoff.go",
		from:    "	_ = l.holds[n.index].await(ctx)\n",
		to:      "	_ = l.holds[n.index].await(ctx)\n	l.holds[n.index].abandon()\n",
		killers: "TestFailedHandOffReleasesAndServesTheWaiter|TestHandOffTooSlowForTheWaitersTTLStillReleases",
	},
	{
		name:    "straggler-release-skipped",
		file:    "internal/engine/acquire.go",
		from:    "	if h.finishCall(a.take, b.yes, err) {\n		l.releaseNode(n, a.ttl)\n	}",
		to:      "	h.finishCall(a.take, b.yes, err)",
		killers: "TestLateReplyAfterFailedAttemptIsReleased|TestLateReplyAfterUnlockIsReleased",
	},
	{
		name:    "timed-out-node-counts-as-yes",
		file:    "internal/engine/quorumfirst.go",
		from:    "			f.r.failPending(f.c.nodes, f.pending, ErrNodeTimeout)",
		to:      "			f.r.tally.Yes += f.npending",
		killers: "TestNodeDeadlineIsEnforcedByTheLibrary",
	},
	{
		name:    "drift-is-zero",
		file:    "internal/core/validity.go",
		from:    "	return time.Duration(d) + ClockPrecision\n",
		to:      "	return 0\n",
		killers: "TestDrift|TestUntilIsStartPlusTTLMinusDrift",
	},
	{
		name:    "until-counts-from-the-decision",
		file:    "internal/engine/acquire.go",
		from:    "	until, ok := core.Lease(r.won(), r.start, r.decided, l.ttl, l.c.cfg.driftFactor)\n",
		to:      "	until, ok := core.Lease(r.won(), r.decided, r.decided, l.ttl, l.c.cfg.driftFactor)\n",
		killers: "TestUntilCountsFromTheRoundsStartNotItsDecision",
	},
	{
		name:    "release-ignores-the-token",
		file:    "internal/script/lua/release.lua",
		from:    "if ours(cur, ARGV[1]) then",
		to:      "if redis.pcall('EXISTS', KEYS[1]) == 1 then",
		killers: "TestPitfall5_UnlockNeverDeletesAnotherHoldersKey",
	},
	{
		name:    "zero-client-has-quorum-0",
		file:    "internal/engine/redlock.go",
		from:    "	if c == nil || len(c.nodes) == 0 || c.quorum < 1 || c.closing == nil {\n		return errNotNew\n	}",
		to:      "	if c == nil {\n		return errNotNew\n	}",
		killers: "TestZeroClientRefusesEveryCall",
	},
	{
		name:    "notice-refusal-fails-the-script",
		file:    "internal/script/lua/token.lua",
		from:    "  return redis.pcall('PUBLISH', channel, message)",
		to:      "  return redis.call('PUBLISH', channel, message)",
		killers: "TestACLUserWithoutChannelRightsCanUseEveryCall",
	},
	{
		name:    "lost-extend-leaves-its-keys",
		file:    "internal/engine/extend.go",
		from:    "	pass()\n	l.abandon(ttl)\n}",
		to:      "	pass()\n}",
		killers: "TestExtendThatEndsNotHeldLeavesNoKeys|TestExtendAfterTheValidityEndedReleasesWhatAFailedExtendLengthened",
	},
	{
		name:    "lock-ignores-close-while-waiting",
		file:    "internal/wait/queue.go",
		from:    "	case <-t.closing:\n		quit = t.closed\n",
		to:      "",
		killers: "TestLockAfterCloseReturnsErrClosed",
	},
	{
		name:    "backing-off-lock-ignores-close",
		file:    "internal/engine/retry.go",
		from:    "	case <-lp.c.closing:\n		return 0, lp.closedWhileWaiting()\n",
		to:      "",
		killers: "TestCloseEndsALockWaitingOnItsBackoff",
	},
	{
		name:    "round-waits-past-the-validity",
		file:    "internal/engine/drift.go",
		from:    "	if end := validUntil(start, ttl, c.cfg.driftFactor); end.Before(d) {\n		d = end\n	}",
		to:      "",
		killers: "TestSlowMajorityIsNotObtained",
	},
	{
		name:    "fence-without-write-back",
		file:    "internal/engine/fence.go",
		from:    "	if held >= c.quorum {",
		to:      "	if held >= 0 {",
		killers: "TestFenceIsAboveAnEarlierHoldersAcrossDifferentMajorities",
	},
	{
		name:    "guard-ignores-the-marker",
		file:    "internal/core/tally.go",
		from:    "reported && v.Mem.Age < guard:",
		to:      "reported && false:",
		killers: "TestAYoungYesThatWouldCompleteTheMajorityIsHeldBack|TestRestartedMasterIsQuarantined|TestRestartWithPersistenceIsNotQuarantined",
	},
	{
		name:    "repair-counts-a-quarantined-master",
		file:    "internal/engine/extend.go",
		from:    "deadline, skip, ttl, er.on)",
		to:      "deadline, skip, 0, er.on)",
		killers: "TestExtendWhenMajorityLostTokenIsNotHeld",
	},
	{
		name:    "repair-brings-back-a-deleted-key",
		file:    "internal/script/lua/extend.lua",
		from:    " and tonumber(ARGV[4]) ~= born then",
		to:      " then",
		killers: "TestLateExtendNeverRepairsAKeyUnlockDeleted",
	},
	{
		name:    "guard-takes-an-error-for-a-report",
		file:    "internal/core/tally.go",
		from:    "	reported := !v.Err && v.Mem.Reported\n",
		to:      "	reported := v.Mem.Reported || v.Err\n",
		killers: "TestWitnessesAnsweringWithAnErrorStillKeepTheYoungOut",
	},
	{
		name:    "hand-off-skips-the-marker-for-any-ttl",
		file:    "internal/engine/handoff.go",
		from:    "	return nttl <= l.shortest\n",
		to:      "	return true\n",
		killers: "TestHandOffToALongerTTLRecordsItInTheMarker|TestHandOffAfterAnExtendToAShorterTTLRecordsIt",
	},
	{
		name:    "hand-off-always-reads-the-marker",
		file:    "internal/engine/handoff.go",
		from:    "	return nttl <= l.shortest\n",
		to:      "	return false\n",
		killers: "TestHandOffNobodyElseWantsCostsFourCommandsPerMaster",
	},
	{
		name:    "failed-attempt-leaves-no-mark",
		file:    "internal/script/lua/acquire.lua",
		from:    "mark(KEYS[1], KEYS[2], fp, ARGV[2])\n",
		to:      "",
		killers: "TestHandOffIsAnnouncedOnceAnotherClientWaits",
	},
	{
		name:    "handed-lock-valid-from-the-hand-off",
		file:    "internal/engine/wanting.go",
		from:    "		l.startValidity(validUntil(a.first, lp.ttl, c.cfg.driftFactor))\n",
		to:      "		l.startValidity(validUntil(time.Now(), lp.ttl, c.cfg.driftFactor))\n",
		killers: "TestHandOffToAnotherClientCostsOneRoundAndNoRelease",
	},
	{
		name:    "handed-lock-never-confirmed",
		file:    "internal/engine/wanting.go",
		from:    "	if validity(lp.ttl, time.Since(a.first), c.cfg.driftFactor) >= lp.ttl/2 {",
		to:      "	if true {",
		killers: "TestHandedLockAfterALongWaitIsConfirmed",
	},
	{
		name:    "want-never-withdrawn",
		file:    "internal/engine/wanting.go",
		from:    "		defer c.bg.Done()\n		c.publishWant(key, token, 0, ttl)\n",
		to:      "		defer c.bg.Done()\n",
		killers: "TestAWaiterThatGivesUpWithdrawsItsWant",
	},
	{
		name:    "waiter-never-probes-its-token",
		file:    "internal/engine/retry.go",
		from:    "		if l, err := lp.probe(); l != nil || err != nil {",
		to:      "		if l, err := (*Lock)(nil), error(nil); l != nil || err != nil {",
		killers: "TestAWaiterFindsAHandOffWhoseNoticesItMissed",
	},
	{
		name:    "holder-releases-a-handed-token",
		file:    "internal/engine/handoff.go",
		from:    "state != handOffRefused, err) && !ho.remote:",
		to:      "state != handOffRefused, err):",
		killers: "TestAHolderNeverRollsBackAnotherClientsHandedToken",
	},
	{
		name:    "remote-hand-off-takes-a-free-key",
		file:    "internal/script/lua/handoff.lua",
		from:    "and (cur ~= false or remote) then",
		to:      "and cur ~= false then",
		killers: "TestHandOffToAnotherClientLeavesFreeMastersFree",
	},
	{
		name:    "late-copy-of-a-withdrawn-want-kept",
		file:    "internal/wait/wants.go",
		from:    "	if kw.Finished(token) {\n		return\n	}\n",
		to:      "",
		killers: "TestAWantSentToAHungMasterNeitherHoldsTheWaiterNorOutlivesItsWithdrawal",
	},
	{
		name:    "close-leaves-wants-out",
		file:    "internal/engine/wanting.go",
		from:    "		c.withdraw(t.Key, t.Token, t.TTL, false)\n",
		to:      "		_ = t\n",
		killers: "TestClosingAWaitingClientWithdrawsItsWant",
	},
	{
		name:    "late-hand-off-to-an-ended-lock-kept",
		file:    "internal/engine/retired.go",
		from:    "		c.releaseNodeWith(c.nodes[node], key, token, r.ttl, c.announce(script.ReleasedNotice, key, token, 0))\n",
		to:      "",
		killers: "TestAHandOffThatReachesAMasterAfterTheWaitersUnlockIsReleased",
	},
	{
		name:    "acquire-refusal-names-one-holder-for-all",
		file:    "internal/script/lua/acquire.lua",
		from:    "  holder = tonumber(fp, 16)",
		to:      "holder = 1",
		killers: "TestRefusalsForDifferentHoldersKeepTheBackoff/three_tokens",
	},
	{
		name:    "taken-by-a-majority-of-refusals-for-any-holders",
		file:    "internal/engine/retry.go",
		from:    "if b.holder == a.holder && errors.Is(b.Err, ErrNodeRefused) {",
		to:      "if errors.Is(b.Err, ErrNodeRefused) {",
		killers: "TestRefusalsForDifferentHoldersKeepTheBackoff/three_tokens",
	},
	{
		name:    "refusals-never-say-the-key-is-held",
		file:    "internal/engine/retry.go",
		from:    "\t\tif n >= qe.Quorum {\n\t\t\treturn true",
		to:      "\t\tif n >= qe.Quorum {\n\t\t\treturn false",
		killers: "TestRefusalsForDifferentHoldersKeepTheBackoff/one_token",
	},
	{
		name:    "want-out-waits-the-longest-backoff",
		file:    "internal/engine/retry.go",
		from:    "	if lp.want != nil && !lp.want.first.IsZero() && (lp.held || lp.w.HeldByOther()) {",
		to:      "	if lp.want != nil && !lp.want.first.IsZero() {",
		killers: "TestAWantNobodyHearsKeepsTheBackoff",
	},
	{
		name:    "given-up-want-not-retired",
		file:    "internal/engine/wanting.go",
		from:    "	c.retire(lp.key, a.token, lp.ttl, nil) // before unexpect: no notice falls between\n",
		to:      "",
		killers: "TestAWaiterThatGivesUpDuringAHandOffToItFreesTheKey/ctx",
	},
	{
		name:    "close-releases-no-want-token",
		file:    "internal/engine/wanting.go",
		from:    "			c.releaseNode(n, t.Key, t.Token, t.TTL)\n",
		to:      "			_, _ = n, t\n",
		killers: "TestAWaiterThatGivesUpDuringAHandOffToItFreesTheKey/Close",
	},
	{
		name:    "pipe-never-stalls",
		file:    "internal/master/pipe.go",
		from:    "	p.arm(now.Add(d.Sub(now)/2), now)",
		to:      "	_ = d",
		killers: "^TestChaos$/^24_",
	},
	{
		name:    "pipe-sends-a-given-up-request",
		file:    "internal/master/sender.go",
		from:    "		if r.send != nil && !r.send.Send() {",
		to:      "		if r.send != nil && !r.send.Send() && false {",
		killers: "TestGivenUpAcquireQueuedInAPipeIsNeverSent",
	},
	{
		name:    "pipe-overflow-without-timer",
		file:    "internal/master/sender.go",
		from:    "	case rest > 0:",
		to:      "	case rest < 0:",
		killers: "TestPipeRequestsBeyondABatchBehindAStallStillGoOut",
	},
	{
		name:    "release-dropped-at-its-node-deadline",
		file:    "internal/master/request.go",
		from:    "	if err == nil || (now.Before(r.keep.Until) && errors.Is(err, context.DeadlineExceeded)) {",
		to:      "	if err == nil {",
		killers: "TestAReleaseQueuedBehindStalledBatchesIsStillSent",
	},
	{
		name:    "late-release-without-a-deadline-of-its-own",
		file:    "internal/master/sender.go",
		from:    "			ctx, cancel = context.WithDeadline(context.WithoutCancel(ctx), now.Add(live[0].keep.Wait))",
		to:      "			ctx, cancel = context.WithCancel(context.WithoutCancel(ctx))",
		killers: "TestALateReleaseHasANodeDeadlineOfItsOwn",
	},
	{
		name:    "hand-off-without-send-check",
		file:    "internal/engine/handoff.go",
		from:    "n.handOff(ctx, nl.holds[n.index], ",
		to:      "n.handOff(ctx, nil, ",
		killers: "TestPipeHandOffNotSentAfterItsRoundWasLost",
	},
	{
		name:    "node-state-every-failure",
		file:    "internal/engine/emit.go",
		from:    "\tcase NodeTimeout, NodeFailed:\n\t\tfailing = true\n",
		to:      "\tcase NodeTimeout, NodeFailed:\n\t\tfailing = true\n\t\tn.health.failing.Store(false)\n",
		killers: "TestObserverAndLogUnderAPausedMaster",
	},
	{
		name:    "queued-waiter-forgets-the-queues-failure",
		file:    "internal/wait/queue.go",
		from:    "\tif q.last != nil {\n\t\t// Say why",
		to:      "\tif false {\n\t\t// Say why",
		killers: "TestQueuedWaitersNameTheOutage",
	},
	{
		name:    "logger-names-keys-by-default",
		file:    "internal/engine/log.go",
		from:    "\tif o.keys {\n\t\treturn slog.String(\"key\", k)",
		to:      "\tif true {\n\t\treturn slog.String(\"key\", k)",
		killers: "TestObserverAndLogUnderAPausedMaster",
	},
	{
		name:    "do-extends-outside-its-span",
		file:    "internal/engine/do.go",
		from:    "l.keepAlive(context.WithoutCancel(ctx), stop",
		to:      "l.keepAlive(context.Background(), stop",
		killers: "TestObserverReportsALockLostInDo",
	},
	{
		name:    "failing-master-outweighs-refusals",
		file:    "internal/engine/emit.go",
		from:    "\tcase refused > 0:\n\t\treturn causeContended\n\tcase failed > 0:\n\t\treturn causeUnreachable",
		to:      "\tcase failed > 0:\n\t\treturn causeUnreachable\n\tcase refused > 0:\n\t\treturn causeContended",
		killers: "TestContentionBesideAFailingMasterIsContended",
	},
	{
		name:    "a-caller-who-left-hides-a-hung-master",
		file:    "internal/engine/emit.go",
		from:    "case out == NodeCanceled && !at.Before(rc.nodeDeadline):",
		to:      "case false && out == NodeCanceled && !at.Before(rc.nodeDeadline):",
		killers: "TestHungMasterIsReportedWhenTheCallerLeaves",
	},
	{
		name:    "round-event-blames-the-masters-for-the-lock-ending",
		file:    "internal/engine/emit.go",
		from:    "if r.obs.cutByValidity(out, err, r.start.Add(ne.Latency)) {",
		to:      "if false && r.obs.cutByValidity(out, err, r.start.Add(ne.Latency)) {",
		killers: "TestExtendAtTheValidityEndBlamesNoMaster",
	},
	{
		name:    "driver-timeout-excused-by-the-lock-ending",
		file:    "internal/engine/emit.go",
		from:    "!errors.Is(err, os.ErrDeadlineExceeded)",
		to:      "os.ErrDeadlineExceeded != nil",
		killers: "TestCappedRoundsStillBlameHungMasters",
	},
	{
		name:    "acquisition-capped-by-validity-excuses-masters",
		file:    "internal/engine/drift.go",
		from:    "\treturn nodeDeadline(d)\n",
		to:      "\treturn roundDeadline{at: d, node: start.Add(c.nodeTimeout(ttl))}\n",
		killers: "TestCappedRoundsStillBlameHungMasters/acquisition_capped_by_its_validity/ContextTimeoutEnabled=false",
	},
	{
		name:    "quarantine-reads-as-contention",
		file:    "internal/engine/emit.go",
		from:    "\t\tcase errors.Is(ne.Err, ErrNodeRefused):\n\t\t\trefused++",
		to:      "\t\tcase errors.Is(ne.Err, ErrNodeRefused), errors.Is(ne.Err, ErrNodeQuarantined):\n\t\t\trefused++",
		killers: "TestQuarantineIsNotContention",
	},
	{
		name:    "resume-repairs-what-it-never-saw",
		file:    "internal/engine/resume.go",
		from:    "b, err := n.extend(ctx, args, 0)",
		to:      "b, err := n.extend(ctx, args, 1)",
		killers: "TestResumeOfATokenThatDoesNotHoldTheKeyChangesNothing",
	},
	{
		name:    "undecided-resume-releases-the-holders-lock",
		file:    "internal/engine/resume.go",
		from:    "\t\tif r.refused > len(c.nodes)-c.quorum {",
		to:      "\t\tif true {",
		killers: "TestResumeThatCannotReachAMajorityLeavesTheLockToItsHolder",
	},
	{
		name:    "refused-resume-leaves-the-keys-it-lengthened",
		file:    "internal/engine/resume.go",
		from:    "\t\t\tl.abandon(ttl)\n",
		to:      "\n",
		killers: "TestFailedResumeLeavesNoLongerKey",
	},
	{
		name:    "resume-takes-any-token",
		file:    "internal/engine/resume.go",
		from:    "\tif err := checkToken(token); err != nil {",
		to:      "\tif err := checkToken(token); err != nil && token == \"\" {",
		killers: "TestResumeRejectsBadInput",
	},
	{
		name:    "inspect-waits-for-a-majority-only",
		file:    "internal/engine/inspect.go",
		from:    "\tfor left := len(nodes); left > 0; left-- {",
		to:      "\tfor left := len(nodes); left > 0 && i.Answered < i.Quorum; left-- {",
		killers: "TestInspectReportsHoldersAndTTLs",
	},
	{
		name:    "inspect-counts-any-value-as-the-token",
		file:    "internal/engine/inspect.go",
		from:    "if v == token { // lua/token.lua's ours",
		to:      "if v != \"\" {",
		killers: "TestInspectReportsHoldersAndTTLs",
	},
	{
		name:    "held-trusts-the-masters-past-until",
		file:    "internal/engine/inspect.go",
		from:    "\treturn time.Now().Before(l.Until()), nil",
		to:      "\treturn true, nil",
		killers: "TestHeldIsFalseAfterUntilWhateverTheMastersSay",
	},
	{
		name:    "inspect-without-a-majority-is-no-error",
		file:    "internal/engine/inspect.go",
		from:    "\tif in.Answered < c.quorum {",
		to:      "\tif in.Answered < 0 {",
		killers: "TestInspectWithoutAMajority|TestInspectByAnACLUserWithoutTheKey",
	},
	{
		name:    "multi-acquire-takes-held-keys",
		file:    "internal/script/lua/acquire_multi.lua",
		from:    "if held then\n",
		to:      "if false then\n",
		killers: "TestTryLockMultiTakesAllOrNone|TestTryLockMultiIsAllOrNoneOnEachMaster",
	},
	{
		name:    "multi-release-deletes-the-first-key-only",
		file:    "internal/script/lua/release_multi.lua",
		from:    "    redis.call('DEL', KEYS[i])\n",
		to:      "    if i == 1 then redis.call('DEL', KEYS[i]) end\n",
		killers: "TestTryLockMultiTakesAllOrNone",
	},
	{
		name:    "multi-extend-with-some-keys",
		file:    "internal/script/lua/extend_multi.lua",
		from:    "  if not ours(redis.pcall('GET', KEYS[i]), ARGV[1]) then\n    return ballot(0, age, longest, born)\n  end\n",
		to:      "",
		killers: "TestExtendMultiNeedsEveryKey|TestDoMultiLosesTheLockWithOneOfItsKeys",
	},
	{
		name:    "multi-waiter-hears-its-first-key-only",
		file:    "internal/engine/multi.go",
		from:    "for _, ev := range events {",
		to:      "for _, ev := range events[:1] {",
		killers: "TestLockMultiIsWokenByAReleaseOfEitherKey",
	},
	{
		name:    "multi-keys-in-two-cluster-slots",
		file:    "internal/engine/multi.go",
		from:    "script.HashSlot(k); a != b {",
		to:      "script.HashSlot(k); a != b && false {",
		killers: "TestMultiKeysOnAClusterVoteNeedOneSlot",
	},
	{
		name:    "multi-key-given-twice",
		file:    "internal/engine/multi.go",
		from:    "\t\tif seen[k] {",
		to:      "\t\tif seen[k] && false {",
		killers: "TestMultiRejectsBadInput",
	},
	{
		name:    "multi-keys-alias-the-callers-slice",
		file:    "internal/engine/multi.go",
		from:    "\treturn append([]string(nil), keys...), ttl, nil",
		to:      "\treturn keys, ttl, nil",
		killers: "TestMultiRejectsBadInput",
	},
	{
		name:    "multi-fence-leaves-the-other-counters",
		file:    "internal/script/lua/fence_multi.lua",
		from:    "  if not c or above(target, c) then\n    redis.call('SET', KEYS[i], target)\n",
		to:      "  if not c then\n    redis.call('SET', KEYS[i], target)\n",
		killers: "TestFenceOfAMultiKeyLock",
	},
	{
		name:    "multi-fence-increments-the-first-counter",
		file:    "internal/script/lua/fence_multi.lua",
		from:    "  redis.call('INCR', KEYS[top])",
		to:      "  redis.call('INCR', KEYS[n + 1])",
		killers: "TestFenceOfAMultiKeyLock",
	},
	{
		name:    "lock-on-the-librarys-own-keys",
		file:    "internal/script/keys.go",
		from:    "\treturn key == PlainMarkerKey || strings.HasSuffix(key, markerSuffix) || strings.HasSuffix(key, FenceSuffix)",
		to:      "\treturn false && strings.HasSuffix(key, markerSuffix)",
		killers: "TestLockRejectsBadInput|TestMultiRejectsBadInput",
	},
	{
		name:    "a-node-bypasses-its-adapter",
		file:    "internal/engine/node.go",
		from:    "\treturn n.conn.Script(ctx, args)",
		to:      "\treturn master.Run(ctx, n.client, args)",
		killers: "TestEveryCallThroughAnotherClientsAdapter",
	},
	{
		name:    "ring-votes-keep-notices",
		file:    "internal/engine/redlock.go",
		from:    "\t\t\tc.cfg.noNotices = true\n",
		to:      "\n",
		killers: "TestRingVotesWaitWithoutNotices",
	},
	{
		name:    "cluster-key-without-a-slot-accepted",
		file:    "internal/engine/errors.go",
		from:    "\tif c.anyCluster && script.Slotless(key) {",
		to:      "\tif false && script.Slotless(key) {",
		killers: "TestClusterVotes/keys_whose",
	},
	{
		name:    "cluster-scripts-use-plain-publish",
		file:    "internal/script/lua/token.lua",
		from:    "  if string.byte(channel, 1) == 123 then",
		to:      "  if false then",
		killers: "TestClusterVotes/a_hand-off's_notice_counts_as_heard",
	},
	{
		name:    "a-not-ours-heals-a-failing-master",
		file:    "internal/engine/emit.go",
		from:    "(out == NodeRefused && op != \"lock\") {",
		to:      "(out == NodeRefused && op == \"unlock\") {",
		killers: "TestAMasterAtMaxmemoryIsReportedOnce",
	},
	{
		name:    "quarantine-reported-once-ever",
		file:    "internal/engine/emit.go",
		from:    "c.nodes[a.node].health.quarantined.Store(false)",
		to:      "_ = a",
		killers: "TestObserverReportsASecondQuarantine",
	},
	{
		name:    "a-release-ends-the-quarantine",
		file:    "internal/engine/emit.go",
		from:    "if a.yes && !out[a.node] && r.guardTTL > 0 {",
		to:      "if a.yes && !out[a.node] {",
		killers: "TestObserverReportsASecondQuarantine",
	},
	{
		name:    "resume-error-quotes-the-token",
		file:    "internal/engine/resume.go",
		from:    "36 characters; got %d)\", ErrInvalidArgument, len(token))",
		to:      "got %q)\", ErrInvalidArgument, token)",
		killers: "TestNoTokenInAMangledResumesError",
	},
	{
		name:    "fence-error-names-the-key",
		file:    "internal/engine/node.go",
		from:    "\"redlock: the lock's fence counter is %q, not a positive integer\", s)",
		to:      "\"redlock: fence counter of %q is %q, not a positive integer\", key, s)",
		killers: "TestLogNamesNoKeyInErrors",
	},
	{
		name:    "shard-subscription-stays-where-its-slot-was",
		file:    "internal/master/shardsubs.go",
		from:    "if !ss.confirmed[ch] && now.Sub(at) > confirmWithin {",
		to:      "if false && !ss.confirmed[ch] && now.Sub(at) > confirmWithin {",
		killers: "TestShardSubsOnAStaleView",
		pkg:     "internal/master",
	},
	{
		name:    "cluster-scripts-publish-on-plain-channels",
		file:    "internal/engine/args.go",
		from:    "ch != \"\" && n.isCluster() {",
		to:      "ch != \"\" && false {",
		killers: "TestClusterVotes/notices_travel_on_shard_channels",
	},
	{
		name:    "shard-subscriptions-share-a-pubsub-across-slots",
		file:    "internal/master/shardsubs.go",
		from:    "slot := script.HashSlot(channel) // the channel is in its key's slot",
		to:      "slot := script.HashSlot(channel) % 3 // the channel is in its key's slot",
		killers: "TestClusterVotes/a_waiter's_subscriptions_survive_a_reconnect",
	},
	{
		name:    "confirmations-not-recorded",
		file:    "internal/master/shardsubs.go",
		from:    "\t\t\t\t\tss.confirmed[m.Channel] = true\n",
		to:      "\n",
		killers: "TestShardSubsUnsubscribeThenSubscribe",
		pkg:     "internal/master",
	},
	{
		name:    "late-subscriber-never-tries-again",
		file:    "internal/wait/waker.go",
		from:    "	if kw.Nsubs++; kw.Nsubs == w.Cfg.Quorum {\n		kw.Gaps++\n",
		to:      "	if kw.Nsubs++; kw.Nsubs == w.Cfg.Quorum {\n",
		killers: "TestAWaiterSubscribedAfterTheReleaseStillHearsTheNextOne",
	},
	{
		name:    "resubscription-not-a-gap",
		file:    "internal/wait/waker.go",
		from:    "		if on { // again: the node's connection was lost, and notices with it\n			kw.Gaps++\n",
		to:      "		if on { // again: the node's connection was lost, and notices with it\n",
		killers: "TestAWaiterWhoseSubscriptionsDroppedStillHearsTheNextRelease",
	},
	{
		name:    "a-doubtful-want-is-handed-the-key",
		file:    "internal/wait/wants.go",
		from:    "		if x.Doubtful(w.Cfg.Quorum) {\n",
		to:      "		if false {\n",
		killers: "TestAClientWhoseSubscriptionsDroppedHandsNothingToAWantItMayHaveMissedServed",
	},
	{
		name:    "resubscription-leaves-wants-trusted",
		file:    "internal/wait/waker.go",
		from:    "			kw.Gaps++\n			kw.deafTo(node)\n",
		to:      "			kw.Gaps++\n",
		killers: "TestAClientWhoseSubscriptionsDroppedHandsNothingToAWantItMayHaveMissedServed",
	},
	{
		name:    "any-dropped-subscription-doubts-every-want",
		file:    "internal/wait/wants.go",
		from:    "func (w *Want) Doubtful(quorum int) bool { return w.ndeaf >= quorum }",
		to:      "func (w *Want) Doubtful(quorum int) bool { return w.ndeaf > 0 }",
		killers: "TestAClientWhoseSubscriptionsDroppedOnAMinorityKeepsTheWantsInLine",
	},
	{
		name:    "an-older-tokens-withdrawal-takes-the-newer-want",
		file:    "internal/wait/wants.go",
		from:    "		if ttl == 0 && w.Token != token {\n			break // an older want's withdrawal: the Client's newer want stands\n		}\n",
		to:      "",
		killers: "TestAWithdrawalOfAnOlderWantLeavesTheClientsNewerOne",
	},
	{
		name:    "a-want-copy-that-lands-after-its-hand-off-stands",
		file:    "internal/engine/wanting.go",
		from:    "		if c.isRetired(token) {\n",
		to:      "		if false {\n",
		killers: "TestAWantCopyThatLandsAfterItsHandOffIsWithdrawn",
	},
	{
		name:    "a-waiter-keeps-its-want-to-itself-after-a-gap",
		file:    "internal/engine/retry.go",
		from:    "			lp.want.at = time.Time{}\n",
		to:      "",
		killers: "TestAWaiterRepeatsItsWantAfterItsSubscriptionsDropped",
	},
	{
		name:    "waiter-counts-gaps-from-zero",
		file:    "internal/engine/retry.go",
		from:    "	lp.gaps = lp.w.Gaps() // a call that starts by waiting trusts what the watch heard so far\n",
		to:      "",
		killers: "TestAWaiterThatStartedWaitingSendsNoAttemptOnOtherNotices",
	},
	{
		name:    "quiet-release-always-announced",
		file:    "internal/script/lua/release.lua",
		from:    "(ARGV[4] ~= '1' or wanted(KEYS[2], cur))",
		to:      "true",
		killers: "TestAnUncontendedLockPublishesNothing",
	},
	{
		name:    "quiet-release-ignores-the-mark",
		file:    "internal/script/lua/release.lua",
		from:    "(ARGV[4] ~= '1' or wanted(KEYS[2], cur))",
		to:      "ARGV[4] ~= '1'",
		killers: "TestAQuietHoldersReleaseWakesAnotherClientsWaiter",
	},
	{
		name:    "announced-lock-released-quietly",
		file:    "internal/engine/unlock.go",
		from:    "	if l.quiet && own == 0 {\n",
		to:      "	if true {\n",
		killers: "TestAnAnnouncedLockIsReleasedAloud",
	},
	{
		name:    "watched-key-taken-quietly",
		file:    "internal/engine/acquire.go",
		from:    "	if c.wk.Listening(key) > 0 {\n",
		to:      "	if false {\n",
		killers: "TestAnAnnouncedLockIsReleasedAloud",
	},
	{
		name:    "a-releases-later-notices-wake-nobody",
		file:    "internal/wait/watch.go",
		from:    "			if kw.Latest == Released {\n				kw.wake()",
		to:      "			if false {\n				kw.wake()",
		killers: "TestAWaiterWhoseAttemptLostToAReleaseOnItsWayHearsTheRestOfIt",
	},
	{
		name:    "subscription-never-pings",
		file:    "internal/master/conn.go",
		from:    "if heard.Swap(false) {",
		to:      "if heard.Swap(false) || true {",
		killers: "TestAWaiterWhoseSubscriptionsWentHalfOpenHearsAgain",
	},
	{
		name:    "a-new-waiter-counts-events-from-after-its-watch",
		file:    "internal/engine/retry.go",
		from:    "lp.events, _, _ = lp.w.SinceTaken()",
		to:      "lp.events = lp.w.Events()",
		killers: "TestAWaiterWhoseSubscriptionWasActiveBeforeItLookedTriesAgain",
	},
	{
		name:    "multi-key-waiter-acts-on-repeats",
		file:    "internal/engine/multi.go",
		from:    "if releases[j] != n && w.Latest() == wait.Released {",
		to:      "if (releases[j] != n || true) && w.Latest() == wait.Released {",
		killers: "TestAMultiKeyWaiterActsOnlyOnANewRelease",
	},
	{
		name:    "multi-key-waiter-sleeps-through-a-release-where-it-was-refused",
		file:    "internal/engine/multi.go",
		from:    "\t\tif marks.freed(j) {\n\t\t\treturn nil",
		to:      "\t\tif false && marks.freed(j) {\n\t\t\treturn nil",
		killers: "TestLockMultiTriesAgainWhenTheMastersThatRefusedItReleaseLater|TestAMultiKeyWaiterActsOnlyOnANewRelease",
	},
	{
		name:    "multi-key-waiter-never-looks-again-at-a-late-yes",
		file:    "internal/engine/multi.go",
		from:    "cases[3] = reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(marks.changed)}",
		to:      "cases[3] = reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf((chan struct{})(nil))}",
		killers: "TestLockMultiLooksAgainWhenItsAttemptsYesComesLate",
	},
	{
		name:    "multi-key-refusal-marks-count-from-the-attempts-start",
		file:    "internal/engine/multi.go",
		from:    "m.at[i][node] = w.NodeReleases(node) // 0 while unwatched: the watch counts from 0",
		to:      "m.at[i][node] = m.began[i][node] + 0*w.NodeReleases(node)",
		killers: "TestAMultiKeyWaiterActsOnlyOnANewRelease",
	},
	{
		name:    "multi-key-waiter-acts-on-late-releases-after-losing-everywhere",
		file:    "internal/engine/multi.go",
		from:    "return m.yes && m.watches[i].ReleasedSince(m.at[i])",
		to:      "return m.watches[i].ReleasedSince(m.at[i])",
		killers: "TestAMultiKeyWaiterActsOnlyOnANewRelease",
	},
	{
		name:    "a-new-multi-key-waiter-counts-releases-from-after-its-watch",
		file:    "internal/engine/multi.go",
		from:    "events[i], releases[i], gaps[i] = watches[i].SinceTaken()",
		to:      "_, _, gaps[i] = watches[i].SinceTaken(); events[i], releases[i] = watches[i].ReleasesSince()",
		killers: "TestAMultiWaiterCountsReleasesFromItsWatch",
	},
	{
		name:    "a-multi-key-waiter-watches-no-key-before-its-first-attempt",
		file:    "internal/engine/multi.go",
		from:    "watches[i] = c.wk.Existing(k)",
		to:      "watches[i] = nil; _ = k",
		killers: "TestAMultiWaiterHearsAReleaseDuringItsFirstAttempt",
	},
	{
		name:    "a-multi-key-waiter-ignores-gaps",
		file:    "internal/engine/multi.go",
		from:    "if w.Gaps() != gaps[j] && w.Subscribed() {",
		to:      "if false && w.Gaps() != gaps[j] && w.Subscribed() {",
		killers: "TestAMultiWaiterTriesAgainWhenItsSubscriptionBecomesActive",
	},
	{
		name:    "a-late-majority-attempts-rollback-silent",
		file:    "internal/engine/acquire.go",
		from:    "if int(l.yeses.Load()) >= c.quorum {",
		to:      "if false && int(l.yeses.Load()) >= c.quorum {",
		killers: "TestALateMajorityAttemptAnnouncesItsRollback",
	},
	{
		name:    "multi-key-rollback-announces-every-key",
		file:    "internal/script/lua/release_multi.lua",
		from:    "  if not quiet or marked[i] then\n",
		to:      "  if true then\n",
		killers: "TestALateMajorityMultiKeyAttemptAnnouncesItsRollback",
	},
	{
		name:    "multi-key-rollback-silent",
		file:    "internal/engine/node.go",
		from:    "		argv = append(argv, a.quiet)\n",
		to:      "		argv = append(argv, a.quiet)\n		if a.quiet == \"1\" {\n			argv[1] = \"\"\n		}\n",
		killers: "TestALateMajorityMultiKeyAttemptAnnouncesItsRollback",
	},
	{
		name:    "every-failed-attempts-rollback-announced",
		file:    "internal/engine/acquire.go",
		from:    "int(l.yeses.Load()) >= c.quorum",
		to:      "int(l.yeses.Load()) >= 0",
		killers: "TestAMinorityAttemptsRollbackIsSilent",
	},
	{
		name:    "clean-up-queued-by-a-worker",
		file:    "internal/engine/acquire.go",
		from:    "\tif n.pipe != nil {\n\t\tctx, cancel := context.WithTimeout(context.Background(), c.nodeTimeout(ttl))\n",
		to:      "\tif false && n.pipe != nil {\n\t\tctx, cancel := context.WithTimeout(context.Background(), c.nodeTimeout(ttl))\n",
		killers: "TestAWaitersNextAttemptFindsItsLastOnesTokenGone",
	},
	{
		name:    "clean-up-queued-last",
		file:    "internal/master/pipe.go",
		from:    "p.queue = slices.Insert(p.queue, 0, r)",
		to:      "p.queue = append(p.queue, r)",
		killers: "TestAWaitersNextAttemptFindsItsLastOnesTokenGone",
	},
	{
		name:    "batch-sends-unknown-scripts-by-sha",
		file:    "internal/master/sender.go",
		from:    "\tp.withSources(reqs)\n",
		to:      "",
		killers: "TestAWaitersNextAttemptFindsItsLastOnesTokenGone",
	},
	{
		name:    "close-forgets-wants-given-up-lately",
		file:    "internal/engine/redlock.go",
		from:    "c.lateTickets(time.Now().Add(-wait.WantFresh))",
		to:      "nil",
		killers: "TestCloseReleasesAHandOffToAWantItGaveUpLately",
	},
	{
		name:    "close-releases-want-locks-only-expired-here",
		file:    "internal/engine/retired.go",
		from:    "		if r.l != nil && !r.l.letGo() {\n\t\t\tcontinue",
		to:      "		if r.l != nil && !r.l.letGo() && time.Now().Before(r.l.Until()) {\n\t\t\tcontinue",
		killers: "TestCloseLeavesAHandedLockResumedElsewhere",
	},
	{
		name:    "taken-hand-off-ignores-close",
		file:    "internal/engine/wanting.go",
		from:    "\tif err := c.enter(); err != nil {\n\t\treturn nil, lp.closedWhileWaiting()\n\t}\n\tdefer c.bg.Done()\n\tl := c.handedLock(lp.key, a.token, lp.ttl, true)\n\tc.retire",
		to:      "\tl := c.handedLock(lp.key, a.token, lp.ttl, true)\n\tc.retire",
		killers: "TestCloseDuringATakenHandOffReturnsNoLock/notices",
	},
	{
		name:    "probed-hand-off-ignores-close",
		file:    "internal/engine/wanting.go",
		from:    "\tif err := c.enter(); err != nil {\n\t\treturn nil, lp.closedWhileWaiting()\n\t}\n\tdefer c.bg.Done()\n\tl := c.handedLock(lp.key, a.token, lp.ttl, true)\n\tif won",
		to:      "\tl := c.handedLock(lp.key, a.token, lp.ttl, true)\n\tif won",
		killers: "TestCloseDuringATakenHandOffReturnsNoLock/probe",
	},
	{
		name:    "confirmation-closed-keeps-its-token",
		file:    "internal/engine/wanting.go",
		from:    "\tc.retire(lp.key, a.token, lp.ttl, nil)\n\tif err != nil {\n\t\treturn nil, err\n\t}",
		to:      "\tif err != nil {\n\t\treturn nil, err\n\t}\n\tc.retire(lp.key, a.token, lp.ttl, nil)",
		killers: "TestCloseDuringATakenHandOffReturnsNoLock/confirm",
	},
	{
		name:    "late-hand-off-releases-want-locks-only-expired-here",
		file:    "internal/engine/lock.go",
		from:    "	if l.released || l.givenUp {\n		return false, false\n	}",
		to:      "	if l.released || l.givenUp || !time.Now().Before(l.until) {\n		return false, false\n	}",
		killers: "TestALateHandOffLeavesAHandedLockResumedElsewhere",
	},
	{
		name:    "hand-off-announced-to-every-client",
		file:    "internal/engine/handoff.go",
		from:    "		announce.Channel = script.HandOffChannel(l.key, to.remote.Client)",
		to:      "		announce.Channel = script.NoticeChannel(l.key)",
		killers: "TestAHandOffIsHeardByItsRecipientAlone",
	},
	{
		name:    "handed-channel-not-sharded-on-a-cluster",
		file:    "internal/wait/waker.go",
		from:    "script.ChannelOn(op.key, script.HandedChannel(op.key, w.Cfg.ID), s.sharded)",
		to:      "script.HandedChannel(op.key, w.Cfg.ID)",
		killers: "TestClusterVotes/a_hand-off_to_another_Client's_waiter",
	},
	{
		name:    "hand-off-to-an-earlier-version-on-its-handed-channel",
		file:    "internal/script/notice.go",
		from:    "	if strings.HasSuffix(client, HandedSuffix) {",
		to:      "	if true {",
		killers: "TestAHandOffToAClientOfAnEarlierVersionIsAnnouncedOnTheKeysChannel",
	},
	{
		name:    "close-withdraws-served-wants-on-one-master-only",
		file:    "internal/engine/wanting.go",
		from:    "	c.withdrawEverywhere(late)\n",
		to:      "\n",
		killers: "TestAClosingClientWithdrawsItsServedWantsOnEveryMaster",
	},
	{
		name:    "close-withdraws-one-round-trip-at-a-time",
		file:    "internal/master/conn.go",
		from:    "				p.Publish(ctx, ch, messages[i])",
		to:      "				g.C.Publish(ctx, ch, messages[i])",
		killers: "TestCloseReleasesServedWantsOnlyOnceTheirWithdrawalsLanded",
	},
	{
		name:    "late-hand-off-released-only-where-heard",
		file:    "internal/engine/retired.go",
		from:    "		c.bg.Add(1) // Close cuts it short, and waits for it: the first late notice's sweep\n		go c.sweepLateHandOff(key, token, cmp.Or(c.cfg.test.lateSweep, c.longestNodeTimeout()))",
		to:      "		_ = 0",
		killers: "TestALateHandOffIsReleasedOnEveryMaster",
	},
	{
		name:    "close-waits-for-a-late-hand-offs-sweep",
		file:    "internal/engine/retired.go",
		from:    "	case <-t.C:\n	case <-c.closing:\n		return\n	}",
		to:      "	case <-t.C:\n	}",
		killers: "TestCloseReleasesALateHandOffWhoseSweepItCutShort",
	},
	{
		name:    "close-forgets-a-late-hand-off-whose-sweep-it-cut-short",
		file:    "internal/engine/retired.go",
		from:    " || (r.sweeping && !r.swept) { // or a sweep Close cut short",
		to:      " { // or a sweep Close cut short",
		killers: "TestCloseReleasesALateHandOffWhoseSweepItCutShort",
	},
	{
		name:    "unlock-of-a-handed-lock-sweeps-no-unheard-master",
		file:    "internal/engine/unlock.go",
		from:    "	defer c.sweepUnheard(l.key, l.token) // a lock a hand-off gave: once decided\n",
		to:      "",
		killers: "TestAHandOffThatReachesAMasterUnheardAfterTheWaitersUnlockIsReleased|TestAHandedLocksMasterWhoseNoticeWasMissedIsReleasedAfterItsUnlock",
	},
	{
		name:    "late-hand-off-released-while-the-locks-unlock-is-undecided",
		file:    "internal/engine/retired.go",
		from:    "		now, _ = r.l.unlockDecided()",
		to:      "		now = true",
		killers: "TestALateHandOffLeavesTheLocksOwnHandOffOnItsWay",
	},
	{
		name:    "served-want-not-withdrawn",
		file:    "internal/engine/wanting.go",
		from:    "		c.publishWant(lp.key, token, 0, lp.ttl)\n\t}()",
		to:      "		_ = token\n\t}()",
		killers: "TestAServedWantIsWithdrawnForTheOtherClients",
	},
	{
		name:    "remote-hand-off-sets-less-than-the-wants-ttl",
		file:    "internal/engine/handoff.go",
		from:    "		announce = script.NewNotice(script.HandedNotice, l.key, to.remote.Client, to.remote.Token, 0)\n",
		to:      "		announce = script.NewNotice(script.HandedNotice, l.key, to.remote.Client, to.remote.Token, 0)\n		nttl /= 4\n",
		killers: "TestAWaiterCountsALostHandOffRoundsMaster",
	},
	{
		name:    "handed-lock-asks-every-master-on-unlock",
		file:    "internal/engine/wanting.go",
		from:    "		c.narrowHanded(a.token)\n",
		to:      "",
		killers: "TestTheUnlockOfAHandedLockAsksOnlyTheMastersHeard",
	},
	{
		name:    "remote-hand-off-asks-masters-the-lock-does-not-hold",
		file:    "internal/engine/handoff.go",
		from:    "	skip := l.refusedNodes()\n",
		to:      "	skip := make([]error, len(ho.nl.holds))\n",
		killers: "TestAQuorumFirstLocksHandOffToAnotherClientSkipsItsReserves",
	},
	{
		name:    "late-notice-while-held-leaves-an-unheard-master-out-of-unlock",
		file:    "internal/engine/hold.go",
		from:    "	h.unheard = false\n	if !h.finishedLocked() {",
		to:      "	if !h.finishedLocked() {",
		killers: "TestAHandOffThatReachesAMasterWhileItsLockIsHeldIsReleasedByItsUnlock",
	},
	{
		name:    "late-notice-while-held-leaves-a-refused-master-out-of-unlock",
		file:    "internal/engine/hold.go",
		from:    "	h.mayHold = true\n	return true\n}",
		to:      "	return h.mayHold\n}",
		killers: "TestAHandOffThatLandsAfterAnExtendWasRefusedThereCountsInTheUnlock",
	},
	{
		name:    "unheard-sweep-timed-from-the-locks-taking",
		file:    "internal/engine/retired.go",
		from:    "		c.bg.Add(1) // Close cuts it short, and waits for it\n		go c.sweepLateHandOff(key, token, cmp.Or(c.cfg.test.lateSweep, c.longestNodeTimeout()))",
		to:      "		c.bg.Add(1) // Close cuts it short, and waits for it\n		go c.sweepLateHandOff(key, token, cmp.Or(c.cfg.test.lateSweep, time.Until(r.at.Add(c.longestNodeTimeout()))))",
		killers: "TestAHandOffThatLandsUnheardSoonAfterTheUnlockIsReleased",
	},
	{
		name:    "extend-counts-an-unheard-master-as-a-refusal",
		file:    "internal/engine/hold.go",
		from:    "	return h.reserved || h.finishedLocked() && !h.mayHold\n",
		to:      "	return h.unheard || h.reserved || h.finishedLocked() && !h.mayHold\n",
		killers: "TestAnExtendCountsAHandedLocksMasterItDidNotHear",
	},
	{
		name:    "extends-yes-leaves-an-unheard-master-out-of-unlock",
		file:    "internal/engine/extend.go",
		from:    "		h.tokenSeen()            // Unlock asks it (narrowHanded)\n",
		to:      "",
		killers: "TestAnExtendCountsAHandedLocksMasterItDidNotHear",
	},
	{
		name:    "unlock-leaves-an-unheard-master-out-when-it-must-count",
		file:    "internal/engine/unlock.go",
		from:    "	r := c.fanOutQuorumFirst(context.WithoutCancel(ctx), \"unlock\", l.key, deadline, l.refusedNodes(), 0, rr, unheard, hedge)",
		to:      "	skip := l.refusedNodes()\n	for i := range skip {\n		if unheard&(1<<i) != 0 {\n			skip[i] = ErrNodeRefused\n		}\n	}\n	r := c.fanOutQuorumFirst(context.WithoutCancel(ctx), \"unlock\", l.key, deadline, skip, 0, rr, 0, hedge)",
		killers: "TestTheUnlockOfAHandedLockAsksAnUnheardMasterWhenItMustCount/lost/released",
	},
	{
		name:    "hand-off-leaves-an-unheard-master-out-when-it-must-count",
		file:    "internal/engine/handoff.go",
		from:    "		unheard, hedge = l.unlockReserves(ho.nttl)\n",
		to:      "		for i := range skip {\n			if l.unheardNodes()&(1<<i) != 0 {\n				skip[i] = ErrNodeRefused\n				ho.nl.holds[i].finish(false, nil)\n				ho.calls.holds[i].finish(false, nil)\n			}\n		}\n",
		killers: "TestTheUnlockOfAHandedLockAsksAnUnheardMasterWhenItMustCount/lost/handed_on",
	},
	{
		name:    "unlock-waits-the-hedge-near-the-validitys-end",
		file:    "internal/engine/hold.go",
		from:    "	if left < 2*hedge {\n		return 0, 0\n	}\n",
		to:      "	_ = left\n",
		killers: "TestTheUnlockOfAHandedLockAsksAnUnheardMasterWhenItMustCount/paused_near_the_end",
	},
	{
		name:    "unlock-hedges-before-its-client-timed-a-round",
		file:    "internal/engine/hold.go",
		from:    "reserve == 0 || l.c.usualRound.Load() == 0 {",
		to:      "reserve == 0 {",
		killers: "TestAnUnlockAsksEveryMasterAtOnceBeforeItsClientTimedARound",
	},
	{
		name:    "remote-hand-off-skips-an-unheard-master-an-extend-was-refused-on",
		file:    "internal/engine/handoff.go",
		from:    "			skip[i], err = nil, nil\n",
		to:      "",
		killers: "TestAHandOffThatLandsUnheardAfterAnExtendWasRefusedThereCountsInTheUnlock",
	},
	{
		name:    "waiter-counts-hand-offs-before-its-handed-channel-is-confirmed",
		file:    "internal/wait/wants.go",
		from:    "	return h.Kw.Nsubs >= h.W.Cfg.Quorum && h.Kw.Nhsubs >= h.W.Cfg.Quorum",
		to:      "	return h.Kw.Nsubs >= h.W.Cfg.Quorum",
		killers: "TestAWaiterCountsHandOffsOnlyOnceItsHandedChannelIsConfirmed",
	},
}

func main() {
	run := flag.String("run", "", "only the mutants whose name contains this")
	timeout := flag.Duration("timeout", 5*time.Minute, "for one mutant's tests")
	generator := flag.Int("generator", 0, "also run this many calls of the fault generator on each mutant")
	seed := flag.String("seed", "", "REDLOCK_CHAOS_SEED for the generator (default: random)")
	alone := flag.Bool("alone", false, "build every mutant alone, none in the shared build")
	baseline := flag.Bool("baseline", false, "first run the shared build's killers with no mutant chosen: all must pass")
	parallel := flag.Int("parallel", 2, "run this many mutants' tests side by side (they mostly wait on the masters)")
	check := flag.Bool("check", false, "only check that every mutant applies (its from occurs once in its file); run no test")
	buildOnly := flag.Bool("build", false, "only build the shared build of the chosen mutants (schemata.go), and say whether it builds; run no test")
	flag.Parse()

	root, err := moduleRoot()
	if err != nil {
		fail(err)
	}
	if *check {
		os.Exit(checkApply(root))
	}
	var chosen []mutant
	for _, m := range mutants {
		if strings.Contains(m.name, *run) {
			chosen = append(chosen, m)
		}
	}
	// Most mutants share one build (schemata.go); the others build alone,
	// a few ahead, while the tests run: builds take most of the CPU and
	// tests mostly wait on the masters.
	var in map[int]bool
	var shared *build
	if !*alone {
		shared, in = buildShared(root, chosen, *timeout)
	}
	if *buildOnly {
		if shared == nil {
			os.Exit(1)
		}
		fmt.Printf("the shared build holds %d of %d mutants, and builds (%.0fs); the others build alone:\n", len(in), len(chosen), shared.took.Seconds())
		for i, m := range chosen {
			if !in[i] {
				fmt.Printf("  %s (%s)\n", m.name, m.file)
			}
		}
		shared.shared = false
		shared.remove()
		return
	}
	if *baseline && shared != nil {
		start := time.Now()
		run := baselineRun(chosen, in)
		verdict, detail := shared.try(run, nil, 4*(*timeout)) // more than a hundred tests
		status := "passed"
		if verdict != "SURVIVED" { // what a mutant's passing tests are called
			status = "FAILED"
		}
		fmt.Printf("%-36s %-8s %6.1fs  the shared build's killers, no mutant chosen\n", "baseline", status, time.Since(start).Seconds())
		if status == "FAILED" { // a test failed without a mutant: a kill would prove nothing
			fmt.Println(indent(detail))
			shared.shared = false
			shared.remove()
			os.Exit(1)
		}
	}
	built := make(chan *build)
	go func() {
		defer close(built)
		ahead := make(chan *build, 4)
		go func() {
			defer close(ahead)
			for i, m := range chosen {
				if !in[i] {
					ahead <- prepare(root, m, *timeout, *generator > 0)
				}
			}
		}()
		// A build made alone goes to the tests as soon as it is ready,
		// between the shared build's mutants, so that the builds never
		// fall behind.
		var pending <-chan *build = ahead
		for i := 0; ; {
			for i < len(chosen) && !in[i] {
				i++
			}
			if i == len(chosen) {
				break
			}
			select {
			case b, ok := <-pending:
				if !ok {
					pending = nil // closed: a nil channel is never ready
					continue
				}
				built <- b
			default:
				b := *shared
				b.m, b.env = chosen[i], []string{schemataEnv + "=" + strconv.Itoa(i)}
				built <- &b
				i++
			}
		}
		if pending != nil {
			for b := range pending {
				built <- b
			}
		}
	}()
	survived, broken, ran := 0, 0, 0
	var failed []string // named again at the end, where a CI log's tail shows them
	var flaky []string  // killed only on a second run: their killers need work
	var buildTime, waited time.Duration
	var mu sync.Mutex // the above, and the output
	var wg sync.WaitGroup
	for range max(*parallel, 1) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				wait := time.Now()
				b, ok := <-built
				if !ok {
					return
				}
				var out strings.Builder
				verdict, detail, flakily := b.run(&out, *timeout, *generator, *seed)
				b.remove()
				mu.Lock()
				waited += time.Since(wait) - b.ran
				if !b.shared {
					buildTime += b.took
				}
				ran++
				fmt.Print(out.String())
				if flakily {
					flaky = append(flaky, b.m.name)
				}
				switch verdict {
				case "killed", "killed*":
				case "SURVIVED":
					survived++
					failed = append(failed, b.m.name+" survived")
					fmt.Println(indent(detail))
				default:
					broken++
					failed = append(failed, b.m.name+" "+verdict)
					fmt.Println(indent(detail))
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	fmt.Printf("%d mutants: %d killed, %d survived, %d did not apply or build\n", ran, ran-survived-broken, survived, broken)
	if shared != nil {
		fmt.Printf("%d of them in one build, %.0fs\n", len(in), shared.took.Seconds())
		shared.shared = false
		shared.remove()
	}
	fmt.Printf("builds alone took %.0fs in all, %.0fs of which the tests waited for\n", buildTime.Seconds(), waited.Seconds())
	for _, f := range failed {
		fmt.Println("  " + f)
	}
	for _, f := range flaky {
		fmt.Println("  " + f + " killed only on a second run: make its killers fail every time")
	}
	if ran == 0 || survived > 0 || broken > 0 {
		os.Exit(1)
	}
}

// baselineRun is a -test.run pattern for the top-level tests that kill
// the mutants of chosen in the shared build (in), but the fault suite's
// (TestChaos: its scenarios run in the race run), as killerNames finds
// them.
func baselineRun(chosen []mutant, in map[int]bool) string {
	names := map[string]bool{}
	for i, m := range chosen {
		if !in[i] {
			continue
		}
		for _, name := range killerNames(m.killers) {
			if name != "TestChaos" {
				names[name] = true
			}
		}
	}
	return "^(" + strings.Join(slices.Sorted(maps.Keys(names)), "|") + ")$"
}

// run runs b's killers, and the fault generator's calls when generator is
// set, and writes its report to out: the verdict and its detail, and
// whether the mutant was killed only by a second run.
func (b *build) run(out io.Writer, timeout time.Duration, generator int, seed string) (verdict, detail string, flakily bool) {
	start := time.Now()
	defer func() { b.ran = time.Since(start) }()
	m := b.m
	pattern := "^(" + m.killers + ")$"
	if strings.Contains(m.killers, "/") {
		pattern = m.killers // a subtest: the testing package splits the pattern at each slash
	}
	verdict, detail = b.verdict, b.detail
	if verdict == "" {
		verdict, detail = b.try(pattern, nil, timeout)
	}
	if verdict == "SURVIVED" {
		// Once more: a killer that depends on the order of the masters'
		// replies may pass by chance. A mutant killed only then is named
		// as such, so the weak test shows.
		if again, _ := b.try(pattern, nil, timeout); again == "killed" {
			verdict, flakily = "killed*", true
		}
	}
	// The time of its tests: its build overlapped other mutants' tests.
	fmt.Fprintf(out, "%-36s %-8s %6.1fs  %s\n", m.name, verdict, time.Since(start).Seconds(), m.killers)
	if b.note != "" {
		fmt.Fprintln(out, indent(b.note))
	}
	if generator > 0 && b.verdict == "" {
		start := time.Now()
		env := []string{"REDLOCK_CHAOS_SEED=" + seed}
		if seed == "" {
			env = nil
		}
		g, gout := b.try("^TestChaos$/^20_", append(env, fmt.Sprintf("-chaos.ops=%d", generator)), timeout)
		if g == "killed" && !violation.MatchString(gout) {
			g = "FAILED" // for another reason than a property: see its output
			fmt.Fprintln(out, indent(gout))
		}
		fmt.Fprintf(out, "%-36s %-8s %6.1fs  the fault generator, %d calls\n", "", g, time.Since(start).Seconds(), generator)
	}
	return verdict, detail, flakily
}

// A build is one mutant applied to a fresh copy of the module, and its
// test binary; verdict is set when it could not be made.
type build struct {
	m               mutant
	dir, bin        string
	runDir          string // the killers' package directory: where the binary runs
	verdict, detail string
	note            string        // on how it was built
	took, ran       time.Duration // building it; running its tests
	env             []string      // for its test binary: which mutant, in a shared build
	shared          bool          // the build holds other mutants too: remove it once, at the end
}

// buildShared puts what it can of chosen into one build (schemata.go), and
// returns it, with the indexes of the mutants it holds; nil when it could
// not be made (then every mutant is built alone).
func buildShared(root string, chosen []mutant, timeout time.Duration) (*build, map[int]bool) {
	start := time.Now()
	dir, in, err := schemata(root, chosen)
	b := &build{dir: dir, runDir: filepath.Join(dir, enginePkg), shared: true}
	if err == nil && len(in) > 0 {
		var out []byte
		b.bin, out, err = buildSchemata(dir, enginePkg, timeout)
		if err != nil {
			err = fmt.Errorf("%w\n%s", err, tail(out))
		}
	}
	b.took = time.Since(start)
	if err != nil || len(in) == 0 {
		if err != nil {
			fmt.Printf("the shared build failed, so every mutant builds alone: %v\n", err)
		}
		b.shared = false
		b.remove()
		return nil, nil
	}
	return b, in
}

// prepare applies m to a fresh copy of the module and builds the copy's
// test binary, with the fault generator's test when generator is set.
func prepare(root string, m mutant, timeout time.Duration, generator bool) *build {
	b := &build{m: m}
	start := time.Now()
	defer func() { b.took = time.Since(start) }()
	dir, err := os.MkdirTemp("", "redlock-mutant-")
	if err != nil {
		b.verdict, b.detail = "ERROR", err.Error()
		return b
	}
	b.dir, b.bin = dir, filepath.Join(dir, "mutant.test")
	b.runDir = filepath.Join(dir, m.testDir())
	if err := copyModule(root, dir); err != nil {
		b.verdict, b.detail = "ERROR", err.Error()
		return b
	}
	path := filepath.Join(dir, m.file)
	src, err := os.ReadFile(path)
	if err != nil {
		b.verdict, b.detail = "ERROR", err.Error()
		return b
	}
	if n := bytes.Count(src, []byte(m.from)); n != 1 {
		b.verdict, b.detail = "STALE", fmt.Sprintf("%s: the code to mutate occurs %d times, want 1: update the table", m.file, n)
		return b
	}
	if err := os.WriteFile(path, bytes.Replace(src, []byte(m.from), []byte(m.to), 1), 0o644); err != nil {
		b.verdict, b.detail = "ERROR", err.Error()
		return b
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	compile := func() ([]byte, error) { return compileTests(ctx, b.runDir, b.bin) }
	// Builds set the pace of the table, and most of a build is the tests
	// that will not run: the copy keeps only its killers.
	keep := killerNames(m.killers)
	if keep != nil && generator {
		keep = append(keep, "TestChaos")
	}
	saved, err := pruneTests(b.runDir, keep)
	if err != nil {
		b.verdict, b.detail = "ERROR", err.Error()
		return b
	}
	out, err := compile()
	if err != nil && len(saved) > 0 {
		prunedOut := out
		// Something named a test taken out: build the whole package.
		for path, src := range saved {
			if err := os.WriteFile(path, src, 0o644); err != nil {
				b.verdict, b.detail = "ERROR", err.Error()
				return b
			}
		}
		out, err = compile()
		if err == nil {
			b.note = "its pruned copy did not build, the whole one did: " + firstLine(prunedOut)
		}
	}
	if err != nil {
		b.verdict, b.detail = "BROKEN", tail(out) // the mutant did not build
	}
	return b
}

// compileTests builds the test binary bin of the package in dir.
// -trimpath: each copy lives in a new directory, and without it every
// package of the module would miss the build cache; -vet=off: make check
// vets the code once.
func compileTests(ctx context.Context, dir, bin string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, "go", "test", "-c", "-o", bin, "-trimpath", "-vet=off", ".")
	cmd.Dir = dir
	return cmd.CombinedOutput()
}

// killerNames returns the top-level test functions a killers pattern
// names, or nil when it is not a plain list of names (then nothing is
// pruned).
func killerNames(killers string) []string {
	var names []string
	for _, alt := range strings.Split(killers, "|") {
		name, _, _ := strings.Cut(alt, "/") // a subtest: its top-level test
		name = strings.TrimSuffix(strings.TrimPrefix(name, "^"), "$")
		if !testName.MatchString(name) {
			return nil
		}
		names = append(names, name)
	}
	return names
}

var testName = regexp.MustCompile(`^Test[A-Za-z0-9_]*$`)

// pruneTests takes out of the module root's test files (dir's *_test.go)
// every test, benchmark, fuzz target and example but TestMain and those
// named in keep, and the imports left unused. It returns the files it
// changed, as they were. Nothing is pruned when keep is empty.
func pruneTests(dir string, keep []string) (saved map[string][]byte, err error) {
	if len(keep) == 0 {
		return nil, nil
	}
	files, err := filepath.Glob(filepath.Join(dir, "*_test.go"))
	if err != nil {
		return nil, err
	}
	saved = map[string][]byte{}
	for _, path := range files {
		src, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, path, src, parser.ParseComments)
		if err != nil {
			return nil, err
		}
		if !pruneFile(f, keep) {
			continue
		}
		var buf bytes.Buffer
		if err := format.Node(&buf, fset, f); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		saved[path] = src
		if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
			return nil, err
		}
	}
	return saved, nil
}

// pruneFile removes f's test functions not in keep, with their doc
// comments, and the imports no longer used; it reports whether it removed
// any.
func pruneFile(f *ast.File, keep []string) bool {
	var decls []ast.Decl
	dropped := map[*ast.CommentGroup]bool{}
	for _, d := range f.Decls {
		if fn, ok := d.(*ast.FuncDecl); ok && fn.Recv == nil && isTestFunc(fn.Name.Name) && fn.Name.Name != "TestMain" && !slices.Contains(keep, fn.Name.Name) {
			if fn.Doc != nil {
				dropped[fn.Doc] = true
			}
			for _, c := range f.Comments { // comments inside the body go with it
				if c.Pos() > fn.Pos() && c.End() <= fn.End() {
					dropped[c] = true
				}
			}
			continue
		}
		decls = append(decls, d)
	}
	if len(decls) == len(f.Decls) {
		return false
	}
	f.Decls = decls
	f.Comments = slices.DeleteFunc(f.Comments, func(c *ast.CommentGroup) bool { return dropped[c] })
	used := map[string]bool{}
	ast.Inspect(f, func(n ast.Node) bool {
		if sel, ok := n.(*ast.SelectorExpr); ok {
			if id, ok := sel.X.(*ast.Ident); ok {
				used[id.Name] = true
			}
		}
		return true
	})
	unused := func(spec ast.Spec) bool {
		imp := spec.(*ast.ImportSpec)
		path, _ := strconv.Unquote(imp.Path.Value)
		name := importName(path)
		if imp.Name != nil {
			name = imp.Name.Name
		}
		return name != "_" && name != "." && !used[name]
	}
	f.Decls = slices.DeleteFunc(f.Decls, func(d ast.Decl) bool {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.IMPORT {
			return false
		}
		g.Specs = slices.DeleteFunc(g.Specs, unused)
		return len(g.Specs) == 0
	})
	return true
}

// importName guesses the name of the package at path, as the go tool
// names most: the last element, without a major version or a "go-"
// prefix. A wrong guess fails the build, and the whole package is built.
func importName(path string) string {
	elems := strings.Split(path, "/")
	name := elems[len(elems)-1]
	if len(elems) > 1 && majorVersion.MatchString(name) {
		name = elems[len(elems)-2]
	}
	name = strings.TrimPrefix(name, "go-")
	name, _, _ = strings.Cut(name, ".")
	return name
}

var majorVersion = regexp.MustCompile(`^v[0-9]+$`)

// isTestFunc reports whether name is that of a function go test runs.
func isTestFunc(name string) bool {
	for _, prefix := range []string{"Test", "Benchmark", "Fuzz", "Example"} {
		if strings.HasPrefix(name, prefix) {
			return true
		}
	}
	return false
}

// remove deletes the build's copy of the module, unless other mutants
// share it.
func (b *build) remove() {
	if b.dir != "" && !b.shared {
		_ = os.RemoveAll(b.dir)
	}
}

// try runs the build's tests that match run (-test.run); extra holds
// NAME=value environment entries and -flags for the test binary.
func (b *build) try(run string, extra []string, timeout time.Duration) (verdict, detail string) {
	// The test binary's own timeout panics with every goroutine's stack
	// (a test that hangs on the bug catches it too); the ctx is a backstop.
	// failfast: once one killer failed, the mutant is killed; the others
	// need not run.
	args := []string{"-test.count=1", "-test.failfast", "-test.run", run, "-test.timeout", timeout.String()}
	env := slices.Clone(b.env)
	for _, e := range extra {
		if strings.HasPrefix(e, "-") {
			args = append(args, e)
		} else {
			env = append(env, e)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout+time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, b.bin, args...)
	cmd.Dir = b.runDir // where go test runs it: the package's directory
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	switch {
	case err == nil && noTests.Match(out):
		return "BROKEN", tail(out) // its killers match no test
	case err == nil:
		return "SURVIVED", tail(out)
	case ctx.Err() != nil:
		return "killed", tail(out) // hung past its own timeout
	case failedTest.Match(out):
		return "killed", string(out)
	default:
		return "BROKEN", tail(out) // no test ran, or the binary failed to start
	}
}

// noTests matches the testing package's report that no test matched its
// -test.run.
var noTests = regexp.MustCompile(`(?m)^testing: warning: no tests to run`)

// violation matches the fault generator's report of a broken property.
var violation = regexp.MustCompile(`property .*: \d+ violations|SAFETY VIOLATION`)

// failedTest matches go test's report of a failed or panicking test, as
// opposed to a build failure.
var failedTest = regexp.MustCompile(`(?m)^(\s*--- FAIL: |panic: )`)

// copyModule copies the files git tracks (and untracked, unignored ones) to
// dir, so that a mutant never touches the working tree.
func copyModule(root, dir string) error {
	cmd := exec.Command("git", "ls-files", "-z", "--cached", "--others", "--exclude-standard")
	cmd.Dir = root
	list, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("git ls-files: %w", err)
	}
	for _, f := range strings.Split(strings.TrimRight(string(list), "\x00"), "\x00") {
		if err := copyFile(filepath.Join(root, f), filepath.Join(dir, f)); err != nil {
			return err
		}
	}
	return nil
}

func copyFile(from, to string) error {
	in, err := os.Open(from)
	if os.IsNotExist(err) {
		return nil // deleted in the working tree
	}
	if err != nil {
		return err
	}
	defer in.Close()
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		return err
	}
	out, err := os.Create(to)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

func moduleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", err
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", fmt.Errorf("not inside a module")
	}
	return filepath.Dir(mod), nil
}

func tail(out []byte) string {
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return strings.Join(lines[max(0, len(lines)-15):], "\n")
}

func firstLine(out []byte) string {
	line, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	return line
}

func indent(s string) string { return "    " + strings.ReplaceAll(s, "\n", "\n    ") }

func fail(err error) {
	fmt.Fprintln(os.Stderr, "mutants:", err)
	os.Exit(2)
}

// checkApply reports each mutant whose from does not occur exactly once in
// its file, and returns the exit status: 1 if any.
func checkApply(root string) int {
	status := 0
	for _, m := range mutants {
		src, err := os.ReadFile(filepath.Join(root, m.file))
		if err != nil {
			fmt.Printf("%-36s %v\n", m.name, err)
			status = 1
			continue
		}
		if n := strings.Count(string(src), m.from); n != 1 {
			fmt.Printf("%-36s %s: from occurs %d times\n", m.name, m.file, n)
			status = 1
		}
	}
	fmt.Printf("%d mutants checked\n", len(mutants))
	return status
}
