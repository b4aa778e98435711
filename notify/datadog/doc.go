// Package datadog holds Datadog's conventions that the outputs speaking
// to Datadog (package notify/alert's DogStatsD, package notify/upload's
// profiling intake) share, so that both read the environment and write
// tags the way Datadog's own libraries do: a tag list as --tags and
// DD_TAGS give it (ParseTags), the unified service tags (service, env,
// version) with the host, which go on everything stallwatch sends about
// a target (CommonTags), and a value made safe for both wire formats
// (TagValue).
package datadog
