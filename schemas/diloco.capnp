# Messages that cross a site boundary: fragments, progress metadata, join/heal, heartbeats.
# Every frame is one Envelope; its `version` must equal protocolVersion or the frame is refused.
@0xb435619b5ecd24f9;

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("diloco::wire::schema");

const protocolVersion :UInt16 = 1;

# How a fragment's values are stored in `payload` (see libdiloco/include/diloco/codec.hpp).
enum Encoding {
  fp32 @0;   # 4 bytes per value, little-endian IEEE binary32
  bf16 @1;   # 2 bytes per value, upper half of binary32, round to nearest even
  int8 @2;   # 1 byte per value, two's complement, value = q * scale[block]
  int4 @3;   # 4 bits per value (low nibble first), q in [-7, 7], value = q * scale[block]
  e3m0 @4;   # 4-bit float, 1 sign + 3 exponent bits (Streaming DiLoCo, arXiv 2501.18512)
}

enum FragmentKind {
  outerGradient @0;  # island -> syncer: delta = global - local, based on `baseRound`
  globalParams @1;   # syncer -> island: the global fragment as of round `baseRound`
  gradient @2;       # ddp, island -> syncer: the island's token-weighted mean gradient on the
                     # parameters of step `baseRound` (tokens: its tokens, steps: 1)
  globalDelta @3;    # syncer -> island: the change of the global fragment every island holds,
                     # from round `fromRound` to round `baseRound` (quantised broadcasts)
}

struct Fragment {
  kind @0 :FragmentKind;
  island @1 :Int32;          # sender island; -1 for the syncer
  index @2 :UInt32;          # fragment number in the run's FragmentPlan
  baseRound @3 :UInt64;      # global round the delta is based on / round of these params
  tokens @4 :UInt64;         # tokens trained on since baseRound; globalParams in a JoinReply: those of
                             # the send the syncer withdrew (keepsLocal; 0: none)
  steps @5 :UInt64;          # inner steps since baseRound (JoinReply: as tokens)
  encoding @6 :Encoding;
  blockSize @7 :UInt32;      # values per scale (int8, int4, e3m0); 0 for fp32/bf16
  count @8 :UInt64;          # number of values in the fragment
  scales @9 :List(Float32);  # one per block of `blockSize` values
  payload @10 :Data;
  fromRound @11 :UInt64;     # globalDelta: the round the change applies to; 0 for other kinds
  seq @12 :UInt64;           # outerGradient: the sender's number for this send of this fragment,
                             # increasing over its sends (0: unnumbered); globalParams in a
                             # JoinReply: the epoch (high 32 bits) the island numbers its sends in
                             # from then on; 0 otherwise
  mergedSeq @13 :List(UInt64);  # globalParams/globalDelta: per island, the highest `seq` of its
                             # outer gradients of its current epoch (its last JoinReply) that the
                             # syncer is done with as of this round: merged into the fragment, or
                             # dropped and never to be merged (0: none); empty for other kinds.
                             # Islands read it to rebase and to end their final sync
  held @14 :Bool;            # globalParams in a JoinReply: the island holds these values already
                             # (JoinRequest.holds named their digest): no payload and no scales,
                             # fp32, `count` values, and heldDigest. Refused anywhere else
  heldDigest @15 :Data;      # held: the SHA-256 (32 bytes) the syncer matched, so that the island
                             # takes the values of that digest (or refuses the reply); else empty
}

struct FragmentCounters {
  index @0 :UInt32;
  baseRound @1 :UInt64;
  tokens @2 :UInt64;
  steps @3 :UInt64;
}

# Sent by an island every inner step (Decoupled DiLoCo, arXiv 2604.21428).
struct Progress {
  island @0 :Int32;
  localStep @1 :UInt64;
  fragments @2 :List(FragmentCounters);
  finished @3 :Bool;         # trained its budget and flushed: sends no more outer gradients
  diverged @4 :Bool;         # its state holds NaN or infinity: the run cannot go on
  stepSeconds @5 :Float64;   # the island's own inner step time (a running average of its wall
                             # time per step on its chips, its waits for a merge and its sends
                             # left out); 0: not measured yet (or an older peer). The syncer
                             # takes it where shorter than the time between two reports
}

# A (re)started island asks for the current global fragments (heal).
struct JoinRequest {
  island @0 :Int32;
  incarnation @1 :UInt64;    # bumps on every restart of the island
  keepsLocal @2 :Bool;       # keeps its parameters through the heal (a re-join, or restored from
                             # a saved state): its progress is sent again from the new base, so
                             # the syncer drops its pending outer gradients (their tokens and steps
                             # come back in the reply's fragments) and refuses its older epochs'
                             # sends still on their way
  runSeconds @3 :Float64;    # a site process's run time (seconds since its start) when the request
                             # reaches the syncer's process (its relay) over the emulated link: the
                             # syncer plays the partitions of the island's site on that site's
                             # clock. 0: the same process (or a peer that does not say), nothing
                             # to align
  holds @4 :List(Data);      # per fragment of the plan, in index order: the SHA-256 (32 bytes) of
                             # the global fragment the island holds (its fp32 values' bytes), or
                             # empty for none. Where it is the syncer's Θ_p, the reply marks the
                             # fragment held and sends no values (an island started from the
                             # run's parameters; with fp32 frames, one resumed from its saved
                             # state or re-joining a syncer at the round it holds).
                             # Empty list: send every fragment (older peers)
}

# The syncer's answer: every global fragment with its round (kind = globalParams); those the
# request named with the digest of their values come marked held, without values.
struct JoinReply {
  fragments @0 :List(Fragment);
}

struct Heartbeat {
  sender @0 :Int32;          # island id, or -1 for the syncer
  sequence @1 :UInt64;
  sentAtNanos @2 :UInt64;    # sender's clock, passed in by the caller
}

# How a run ended, in the syncer's word to its sites (RunOver).
enum RunOutcome {
  finished @0;   # every island trained its budget (or the final sync expired): exit 0
  stopped @1;    # the run cannot go on (an island or the syncer diverged): exit 1
  failed @2;     # the syncer's supervision tree stopped: exit 1
}

# syncer -> site: the run is over. Pushed to every site in session when the run ends, and the
# answer to a site that proves itself after that: it stops retrying and exits, instead of taking
# the closed connection of a syncer that is gone for a syncer that is restarting.
struct RunOver {
  outcome @0 :RunOutcome;
  reason @1 :Text;           # for the site's log, at most 400 bytes
}

struct Envelope {
  version @0 :UInt16;
  union {
    fragment @1 :Fragment;
    progress @2 :Progress;
    joinRequest @3 :JoinRequest;
    joinReply @4 :JoinReply;
    heartbeat @5 :Heartbeat;
    runOver @6 :RunOver;
  }
  term @7 :UInt64;           # a replicated syncer's frames: its leader's term (etcd revision of its
                             # election); a site refuses frames of a term older than the newest it
                             # has seen. 0: no replicated syncer (islands' frames, a lone syncer)
}
