#!/bin/sh
# Waits until every container of the compose project is healthy (or running,
# for services without a healthcheck). docker-compose 1.29 has no `up --wait`.
project=${COMPOSE_PROJECT_NAME:-zonefleet}
timeout=${WAIT_TIMEOUT:-120}
end=$(( $(date +%s) + timeout ))
while :; do
  ids=$(docker ps -aq --filter "label=com.docker.compose.project=$project")
  if [ -n "$ids" ]; then
    # one-shot init steps (the pki service) count once they exited 0
    bad=$(docker inspect -f '{{.Name}} {{.State.Status}} {{if .State.Health}}{{.State.Health.Status}}{{else}}none{{end}} {{.State.ExitCode}}' $ids |
      awk '!($2 == "exited" && $4 == 0 && $3 == "none") && ($2 != "running" || ($3 != "healthy" && $3 != "none"))')
    [ -z "$bad" ] && { echo "all $(echo "$ids" | wc -w) containers of $project are up"; exit 0; }
  else
    bad="no containers"
  fi
  if [ "$(date +%s)" -ge "$end" ]; then
    echo "not healthy after ${timeout}s:"; echo "$bad"; exit 1
  fi
  sleep 2
done
