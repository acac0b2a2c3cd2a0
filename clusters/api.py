"""REST API of clusters: the partitions a job can ask for."""

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from clusters.models import Cluster, Partition


class PartitionSerializer(serializers.ModelSerializer):
    cluster: serializers.SlugRelatedField[Cluster] = serializers.SlugRelatedField(
        slug_field="name", read_only=True
    )
    billing_weight = serializers.DecimalField(
        max_digits=6,
        decimal_places=3,
        coerce_to_string=False,
        read_only=True,
        help_text="GPU-hours charged per GPU per hour.",
    )
    max_time_minutes = serializers.IntegerField(
        read_only=True, allow_null=True, help_text="null: no limit (the portal allows a year)."
    )

    class Meta:
        model = Partition
        fields = [
            "cluster",
            "name",
            "is_default",
            "is_up",
            "max_time_minutes",
            "nodes",
            "gpus_per_node",
            "gpu_type",
            "total_gpus",
            "billing_weight",
        ]
        read_only_fields = fields


class PartitionQuerySerializer(serializers.Serializer):
    cluster = serializers.CharField(required=False, help_text="Only this cluster's partitions.")


class PartitionList(APIView):
    api_errors = {"get": {400: None}}

    @extend_schema(
        tags=["partitions"],
        summary="The partitions of the enabled clusters",
        parameters=[PartitionQuerySerializer],
        responses=PartitionSerializer(many=True),
    )
    def get(self, request: Request) -> Response:
        partitions = Partition.objects.filter(cluster__is_enabled=True).select_related("cluster")
        params = PartitionQuerySerializer(data=request.query_params)
        params.is_valid(raise_exception=True)
        if "cluster" in params.validated_data:
            partitions = partitions.filter(cluster__name=params.validated_data["cluster"])
        partitions = partitions.order_by("cluster__name", "name")
        return Response(PartitionSerializer(partitions, many=True).data)
