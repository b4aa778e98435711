// Package upload sends a capture's profiles to the Datadog agent's
// profiling intake (POST /profiling/v1/input on the trace agent), in the
// form Datadog's own native profiler writes through libdatadog's profile
// exporter, so that a stall's profile sits beside the service's other
// profiles.
//
// The request is multipart/form-data with three parts: "event"
// (filename event.json, application/json), then "threads.pprof" (the
// capture's threads.pb.gz, when there is one) and "profile.pprof" (its
// profile.pb.gz), each named by its own file name. event.json holds
// attachments (the two names), tags_profiler (comma-separated k:v, ending
// with runtime_platform), start and end (UTC, nanoseconds), family
// "native", version "4", endpoint_counts (null), internal and info. The
// headers are DD-EVP-ORIGIN "stallwatch" and DD-EVP-ORIGIN-VERSION.
// The agent adds the API key and forwards the body unchanged.
//
// Tags: those of the Uploader (service, env, version, host and the
// user's), then the capture's (CaptureTags): language:native,
// profiler_version, process_id, pid, process (runtimes.ProcessName: the
// executable's name, as alerts and hooks name the process), runtime
// (capture.json's, as the findings recognised it, else as the
// executable's name says: package runtimes' IDs, julia, node, jvm …),
// trigger and stall_seconds.
//
// An Uploader is one per stallwatch process and safe for concurrent use;
// retrying is the spool's concern: Upload says with Retryable whether a
// failure may succeed later, with Unsent whether it never reached the
// agent (the agent's failure, not the profile's), and with Unanswered
// whether the agent may have it (sent whole, no answer in time).
package upload
