"""Running batch/v1 Jobs as Kueue's job reconciler does, against any store of Jobs that answers as
an apiserver does (`api.JobApi`): admitflow's own (`stored.StoredJobs`, the JobWorkflows) or a
Kubernetes cluster's (`kubernetes.KubernetesJobs`). `reconciler` holds the writes of an admission
and an eviction, with their conflicts handled; `kube_runner` the Kubernetes runner's worker."""
