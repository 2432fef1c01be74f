package perfetto

// Field numbers of the Perfetto trace protos this package writes, from
// the published definitions in github.com/google/perfetto, directory
// protos/perfetto/trace/ (file named per block). Only numbers are taken;
// the messages are encoded by hand (perfetto.go).

// trace.proto: Trace.
const fTracePacket = 1 // repeated TracePacket packet

// trace_packet.proto: TracePacket.
const (
	fPacketTimestamp        = 8  // uint64
	fPacketTrackEvent       = 11 // TrackEvent
	fPacketSequenceID       = 10 // uint32 trusted_packet_sequence_id
	fPacketInternedData     = 12 // InternedData
	fPacketSequenceFlags    = 13 // uint32
	fPacketTrackDescriptor  = 60 // TrackDescriptor
	fPacketPerfSample       = 66 // PerfSample
	fPacketFirstOnSequence  = 87 // bool first_packet_on_sequence
	seqIncrementalCleared   = 1  // SequenceFlags.SEQ_INCREMENTAL_STATE_CLEARED
	seqNeedsIncrementalData = 2  // SequenceFlags.SEQ_NEEDS_INCREMENTAL_STATE
)

// interned_data/interned_data.proto: InternedData.
const (
	fInternedFunctionNames = 5  // repeated InternedString
	fInternedFrames        = 6  // repeated Frame
	fInternedCallstacks    = 7  // repeated Callstack
	fInternedBuildIDs      = 16 // repeated InternedString
	fInternedMappingPaths  = 17 // repeated InternedString
	fInternedSourcePaths   = 18 // repeated InternedString
	fInternedMappings      = 19 // repeated Mapping
)

// profiling/profile_common.proto: InternedString, Mapping, Frame, Callstack.
const (
	fStringIID = 1 // uint64
	fStringStr = 2 // bytes

	fMappingIID         = 1 // uint64
	fMappingBuildID     = 2 // uint64, iid of build_ids
	fMappingStartOffset = 3 // uint64
	fMappingStart       = 4 // uint64
	fMappingEnd         = 5 // uint64
	fMappingPathIDs     = 7 // repeated uint64, iids of mapping_paths (path components)

	fFrameIID          = 1 // uint64
	fFrameFunctionName = 2 // uint64, iid of function_names
	fFrameMapping      = 3 // uint64, iid of mappings
	fFrameRelPC        = 4 // uint64
	fFrameSourcePath   = 5 // uint64, iid of source_paths
	fFrameLine         = 6 // uint32

	fCallstackIID    = 1 // uint64
	fCallstackFrames = 2 // repeated uint64, frame iids, bottom (outermost) frame first
)

// profiling/profile_packet.proto: PerfSample.
const (
	fPerfSampleCPU       = 1 // uint32
	fPerfSamplePid       = 2 // uint32
	fPerfSampleTid       = 3 // uint32
	fPerfSampleCallstack = 4 // uint64 callstack_iid
)

// track_event/track_descriptor.proto, process_descriptor.proto,
// thread_descriptor.proto, counter_descriptor.proto.
const (
	fTrackUUID    = 1 // uint64
	fTrackName    = 2 // string
	fTrackProcess = 3 // ProcessDescriptor
	fTrackThread  = 4 // ThreadDescriptor
	fTrackParent  = 5 // uint64 parent_uuid
	fTrackCounter = 8 // CounterDescriptor

	fProcessPid  = 1 // int32
	fProcessName = 6 // string process_name

	fThreadPid  = 1 // int32
	fThreadTid  = 2 // int64
	fThreadName = 5 // string thread_name
)

// track_event/track_event.proto: TrackEvent.
const (
	fEventType      = 9  // Type
	fEventTrackUUID = 11 // uint64
	fEventName      = 23 // string
	// debug_annotations (4): DebugAnnotation, its name (10) and
	// string_value (6)
	fEventDebugAnnotations = 4
	fAnnotationName        = 10
	fAnnotationString      = 6
	fEventDoubleValue      = 44 // double double_counter_value
	typeSliceBegin         = 1
	typeSliceEnd           = 2
	typeInstant            = 3
	typeCounter            = 4
	fEventCategories       = 22 // repeated string
)
