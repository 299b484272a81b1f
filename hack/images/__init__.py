"""Building and running the OCI images with buildah (hack/images/build)."""
