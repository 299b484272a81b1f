"""The images and what goes into them: locked dependencies, import closures, buildah builds."""
