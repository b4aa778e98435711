// Package datadog holds Datadog's conventions that the outputs speaking
// to Datadog (package notify/alert's DogStatsD, package notify/upload's
// profiling intake) share, so that both read the environment and write
// tags the way Datadog's own libraries do: a tag list as --tags and
// DD_TAGS give it (ParseTags), the unified service tags (service, env,
// version) with the host, which go on everything stallwatch sends about
// a target (CommonTags), a value made safe for both wire formats
// (TagValue), and where the agent is: Service.Resolve finds one of its
// services — a flag, else the service's own variable (DD_DOGSTATSD_URL,
// DD_TRACE_AGENT_URL), else DD_AGENT_HOST with the service's port, else
// the agent's default socket — with the syntax each output declares.
package datadog
